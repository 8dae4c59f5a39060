"""The merge entry: the inbox into the raw, counter, XID and latest-value tables."""

from __future__ import annotations

from telemetry.store import MergeResult, get_store


def telemetry_merge() -> MergeResult:
    """Merge the inbox into the raw, counter, XID and latest-value tables (PostgreSQL; nothing to do on SQLite).

    Its own transaction, with the inbox locked: safe to run concurrently with ingest and with itself (a second
    merge waits, then finds the inbox empty). The beat runs it every 15 s; the rollup tick and the demo backfill
    run it before they read raw data.
    """
    return get_store().merge()
