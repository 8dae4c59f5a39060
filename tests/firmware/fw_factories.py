"""Catalog test data built through the firmware services (tests of the catalog, compliance, drift, API, views)."""

from __future__ import annotations

import datetime as dt
import itertools

from django.utils import timezone

from firmware.models import Baseline, Bundle, Release
from firmware.services import catalog
from fleet.audit import SYSTEM
from inventory.models import ServerPlatform

_seq = itertools.count(1)
SHA = "ab" * 32


def release(component: str, version: str, **fields) -> Release:
    fields.setdefault("image_url", f"https://fw.example/{component}/{version}.fwpkg")
    return catalog.release_create(component=component, version=version, sha256=SHA, actor=SYSTEM, **fields)


def platform(name: str = "HGX H100 8-GPU") -> ServerPlatform:
    from tests import factories

    return ServerPlatform.objects.get_or_create(name=name, defaults={"gpu_model": factories.gpu_model()})[0]


def bundle(versions: dict[str, str], plat: ServerPlatform | None = None, name: str | None = None) -> Bundle:
    releases = [Release.objects.filter(component=c, version=v).first() or release(c, v) for c, v in versions.items()]
    return catalog.bundle_create(name=name or f"bundle-{next(_seq)}", platform=plat or platform(),
                                 releases=releases, actor=SYSTEM)


def baseline(bundle_obj: Bundle, approver, pool=None, valid_from: dt.datetime | None = None,
             valid_to: dt.datetime | None = None) -> Baseline:
    b = catalog.baseline_create(bundle=bundle_obj, pool=pool, actor=SYSTEM,
                                valid_from=valid_from or timezone.now() - dt.timedelta(days=1), valid_to=valid_to)
    return catalog.baseline_approve(baseline=b, actor=approver)
