"""Inventory's ``sanitized`` and ``disposed`` GPU states belong to this workflow. The guard registered with
``inventory.lifecycle`` refuses them unless the decommission services are moving the GPU (inside
:func:`workflow_moves`) and every medium the GPU carries has a valid signed certificate."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from django.core.exceptions import ValidationError

from decommission.models import Medium
from decommission.selectors import public_keys
from decommission.verify import verify_document
from inventory.models import Gpu

_moving: ContextVar[bool] = ContextVar("decommission_workflow_moves", default=False)
_just_signed: ContextVar[frozenset[int]] = ContextVar("decommission_just_signed", default=frozenset())


@contextlib.contextmanager
def workflow_moves(just_signed: frozenset[int] = frozenset()) -> Iterator[None]:
    """The workflow moves GPUs inside this block. ``just_signed``: GPUs whose every medium's certificate was
    issued and signed in this very transaction (certification), so the guard need not re-verify them."""
    token, signed = _moving.set(True), _just_signed.set(just_signed)
    try:
        yield
    finally:
        _moving.reset(token)
        _just_signed.reset(signed)


def gpu_certified_guard(gpu: Gpu, to_state: str) -> None:
    """Refuse ``sanitized``/``disposed`` outside the workflow or without a valid certificate per medium."""
    if not _moving.get():
        raise ValidationError(f"Only the decommission workflow moves a GPU to '{to_state}' (it needs a valid "
                              "sanitization certificate for every medium); use a decommission request.",
                              code="decommission_only")
    if gpu.pk in _just_signed.get():
        return
    media = list(Medium.objects.filter(gpu=gpu).select_related("certificate").order_by("-request_id", "id"))
    if not media:
        raise ValidationError(f"GPU {gpu} has no recorded media in a decommission request.", code="no_certificate")
    latest = media[0].request_id
    media = [m for m in media if m.request_id == latest]
    keys = public_keys()
    for medium in media:
        cert = getattr(medium, "certificate", None)
        if cert is None:
            raise ValidationError(f"GPU {gpu}: {medium} has no certificate.", code="no_certificate")
        problems = verify_document(cert.document, keys)
        if problems:
            raise ValidationError(f"GPU {gpu}: the certificate of {medium} is not valid: {problems[0]}",
                                  code="invalid_certificate")
