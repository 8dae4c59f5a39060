"""PostgreSQL plumbing of the engine: advisory-lock keys, server locks, asynchronous commit, the vendor check."""

from __future__ import annotations

import zlib

from django.db import connection

TICK_LOCK = zlib.crc32(b"fleet.rollout.tick")
SERVER_LOCK_NS = zlib.crc32(b"fleet.rollout.server") & 0x7FFFFFFF
SITE_LOCK_NS = zlib.crc32(b"fleet.rollout.site") & 0x7FFFFFFF
POOL_LOCK_NS = zlib.crc32(b"fleet.rollout.pool") & 0x7FFFFFFF


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def lock_servers(server_ids: list[int]) -> set[int]:
    """Session advisory locks on the servers' ids (released by ``unlock_servers`` or when the connection dies
    with a killed worker). Returns the ids locked."""
    if not server_ids:
        return set()
    if not is_postgres():  # SQLite (the embedded default): one worker process drives every BMC
        return set(server_ids)
    with connection.cursor() as cursor:
        cursor.execute("SELECT s, pg_try_advisory_lock(%s, s) FROM unnest(%s::int[]) AS s",
                       [SERVER_LOCK_NS, list(set(server_ids))])
        return {s for s, ok in cursor.fetchall() if ok}


def unlock_servers(server_ids: set[int]) -> None:
    if server_ids and is_postgres():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, s) FROM unnest(%s::int[]) AS s",
                           [SERVER_LOCK_NS, list(server_ids)])


def async_commit(on: bool) -> None:
    """Commits of this worker's steps do not wait for the WAL flush (``synchronous_commit = off``): a PostgreSQL
    crash may forget the last ~0.2 s of state changes, which the next step redoes after reconciling. The record
    of a side effect (``_record``) is the exception: it is flushed before the BMC is asked anything."""
    if is_postgres():
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO %s" % ("off" if on else "DEFAULT"))  # noqa: S608, UP031
