"""The id of the request being served, for audit events and log records written while it runs.

Settings (logging) and models-free code import this module, so it imports nothing of Django's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_request_id: ContextVar[str] = ContextVar("fleet_request_id", default="")


@contextlib.contextmanager
def request_id_context(request_id: str) -> Iterator[None]:
    """Stamp every audit event and log record written inside the block with ``request_id``."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)


def current_request_id() -> str:
    return _request_id.get()
