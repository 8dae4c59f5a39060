"""Sign-in throttling for ``/login/`` and ``/api/v1/auth/token/``, checked before any password is hashed.

Three limits, all kept in Django's cache (Redis when ``REDIS_URL`` is set, else a database table), so
they hold across gunicorn workers:

- every sign-in attempt of a client (its address) counts against ``FLEET_LOGIN_CLIENT_RATE`` per minute;
- ``FLEET_LOGIN_ACCOUNT_FAILURES`` wrong passwords for one account lock that account, and
  ``FLEET_LOGIN_CLIENT_FAILURES`` wrong passwords from one client lock that client, for
  ``FLEET_LOGIN_LOCKOUT_SECONDS``.

A refused attempt costs a few cache reads: no hashing, no database. A lock is audited when it starts.
A successful sign-in clears the account's failure count.
"""

from __future__ import annotations

import hashlib
import math
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from fleet.audit import audit_account_event
from fleet.models import AuditAction

PREFIX = "fleet:signin"
WINDOW = 60  # seconds of the per-client attempt rate


def client_address(request: HttpRequest) -> str:
    """The client's address: ``REMOTE_ADDR``, or the first hop of ``FLEET_CLIENT_IP_HEADER`` (e.g.
    ``HTTP_X_FORWARDED_FOR``) when Fleet runs behind a proxy that sets it."""
    header = getattr(settings, "FLEET_CLIENT_IP_HEADER", "")
    if header and (value := request.META.get(header, "")):
        return value.split(",")[0].strip()[:64]
    return request.META.get("REMOTE_ADDR", "")[:64] or "unknown"


def _account(username: str) -> str:
    return hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]


def _keys(address: str, username: str) -> dict[str, str]:
    account = _account(username)
    return {"client_lock": f"{PREFIX}:lock:c:{address}", "account_lock": f"{PREFIX}:lock:a:{account}",
            "client_fail": f"{PREFIX}:fail:c:{address}", "account_fail": f"{PREFIX}:fail:a:{account}"}


def _incr(key: str, timeout: int) -> int:
    cache.add(key, 0, timeout)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout)
        return 1


def signin_check(*, address: str, username: str) -> int | None:
    """Seconds the caller must wait before this attempt may be tried, or ``None`` to go ahead.

    Call before authenticating: a refused attempt never reaches the password hasher."""
    now = time.time()
    keys = _keys(address, username)
    locks = cache.get_many([keys["client_lock"], keys["account_lock"]])
    until = max(locks.values(), default=0)
    if until > now:
        return max(1, math.ceil(until - now))
    window = int(now // WINDOW)
    attempts = _incr(f"{PREFIX}:rate:{address}:{window}", WINDOW * 2)
    if attempts > settings.FLEET_LOGIN_CLIENT_RATE:
        return max(1, math.ceil((window + 1) * WINDOW - now))
    return None


def signin_failed(*, address: str, username: str) -> None:
    """Count a wrong password; lock the account or the client when it reaches its limit (audited)."""
    lockout = settings.FLEET_LOGIN_LOCKOUT_SECONDS
    keys = _keys(address, username)
    until = time.time() + lockout
    if username and _incr(keys["account_fail"], lockout) >= settings.FLEET_LOGIN_ACCOUNT_FAILURES:
        cache.set(keys["account_lock"], until, lockout)
        cache.delete(keys["account_fail"])
        audit_account_event(username=username, action=AuditAction.LOCKOUT,
                            message=f"Sign-in locked for {lockout} s after {settings.FLEET_LOGIN_ACCOUNT_FAILURES} "
                                    f"wrong passwords (last from {address})")
    if _incr(keys["client_fail"], lockout) >= settings.FLEET_LOGIN_CLIENT_FAILURES:
        cache.set(keys["client_lock"], until, lockout)
        cache.delete(keys["client_fail"])
        audit_account_event(username=username, action=AuditAction.LOCKOUT,
                            message=f"Client {address} locked out of sign-in for {lockout} s after "
                                    f"{settings.FLEET_LOGIN_CLIENT_FAILURES} wrong passwords")


def signin_succeeded(*, address: str, username: str) -> None:
    cache.delete(_keys(address, username)["account_fail"])
