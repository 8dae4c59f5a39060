"""Compliance: every in-scope server and GPU against the baseline in force, computed set-based in SQL.

``compliance_recompute()`` rewrites two derived tables in one transaction, with a constant number of
statements whatever the fleet size (measured: bench/firmware.py, docs in the function):

- ``ComplianceStatus``: for each server whose platform has a baseline in force now (approved, inside its
  validity window; a pool's baseline wins over the platform-wide one), one row per bundle component on the
  server, with the expected and the observed version and ``compliant`` / ``drift`` / ``unknown``. Server
  components are read from the latest observation per (server, component). The per-GPU components (VBIOS,
  InfoROM) are grouped: one row per (server, component, version its GPUs report) with ``gpu_count``, read
  from the GPU's ``vbios_version`` / ``inforom_image`` columns, which the imports and ``firmware_observe``
  keep on the latest observation. 100,000 GPUs on 11,875 servers make ~107,500 rows (83,000 of them server
  components; 24,400 GPU groups), not ~273,000.
- ``FirmwareTuple``: each server's firmware identity (every catalogued component's current versions,
  lower-cased, hashed), for scheduler labels and the mixed-firmware findings.

Both are built from one temporary table of what is observed now (the latest observation per server component
and the GPU groups), so the observation and GPU tables are read once.

Versions compare by ``version_key`` (case, zero padding and VBIOS hex groups handled): the distinct observed
versions are few (tens), so their keys are computed in Python into a second temporary table.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from firmware.models import Baseline, BundleItem, ComplianceStatus, FirmwareTuple, Pool, Release, version_key
from firmware.services.catalog import CATALOGUED, PER_GPU
from inventory.models import FirmwareComponent, FirmwareObservation, Gpu, Server

# Per-GPU components and the GPU column holding the current version.
GPU_COLUMNS = {FirmwareComponent.GPU_VBIOS.value: "vbios_version",
               FirmwareComponent.GPU_INFOROM_IMAGE.value: "inforom_image"}
assert set(GPU_COLUMNS) == PER_GPU

T = {
    "obs": FirmwareObservation._meta.db_table,
    "gpu": Gpu._meta.db_table,
    "server": Server._meta.db_table,
    "baseline": Baseline._meta.db_table,
    "item": BundleItem._meta.db_table,
    "release": Release._meta.db_table,
    "pool_servers": Pool.servers.through._meta.db_table,
    "status": ComplianceStatus._meta.db_table,
    "tuple": FirmwareTuple._meta.db_table,
}


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _in(values: Any) -> str:
    """A SQL list of fixed identifiers we own (component values), never user input."""
    return ", ".join(f"'{v}'" for v in sorted(values))



OBSERVED = "compliance_observed"  # the temporary table of what is observed now, read by both INSERTs
VERSION_KEYS = "compliance_version_keys"  # version -> version_key of every version in OBSERVED


def _latest_server_obs() -> str:
    """The latest observation per (server, component) of the catalogued server components (on PostgreSQL in
    the order of ``fwobs_server_latest_idx``)."""
    server_components = _in(CATALOGUED - PER_GPU)
    if _postgres():
        return (f"SELECT DISTINCT ON (server_id, component) server_id, component, version FROM {T['obs']} "
                f"WHERE server_id IS NOT NULL AND component IN ({server_components}) "
                "ORDER BY server_id, component, last_seen DESC, id DESC")
    return (f"SELECT server_id, component, version FROM (SELECT server_id, component, version, ROW_NUMBER() OVER "
            "(PARTITION BY server_id, component ORDER BY last_seen DESC, id DESC) AS rn "
            f"FROM {T['obs']} WHERE server_id IS NOT NULL AND component IN ({server_components})) WHERE rn = 1")


def _gpu_groups() -> str:
    """(server, per-GPU component, version, GPUs reporting it): on PostgreSQL one pass over the GPU table
    (GROUPING SETS, one set per version column), elsewhere one GROUP BY per column."""
    if _postgres():
        component = " ".join(f"WHEN GROUPING({col}) = 0 THEN '{c}'" for c, col in GPU_COLUMNS.items())
        version = " ".join(f"WHEN GROUPING({col}) = 0 THEN {col}" for col in GPU_COLUMNS.values())
        sets = ", ".join(f"(server_id, {col})" for col in GPU_COLUMNS.values())
        return (f"SELECT server_id, CASE {component} END AS component, CASE {version} END AS version, "
                f"COUNT(*) AS gpu_count FROM {T['gpu']} WHERE server_id IS NOT NULL GROUP BY GROUPING SETS ({sets})")
    return " UNION ALL ".join(
        f"SELECT server_id, '{c}' AS component, {col} AS version, COUNT(*) AS gpu_count FROM {T['gpu']} "
        f"WHERE server_id IS NOT NULL GROUP BY server_id, {col}" for c, col in GPU_COLUMNS.items())


def _observed_sql() -> str:
    """``compliance_observed(server_id, component, version, gpu_count)``: what runs now. A server component's
    latest observation (``gpu_count`` 0), and each per-GPU component grouped by (server, version)."""
    on_commit = " ON COMMIT DROP" if _postgres() else ""
    return (f"CREATE TEMPORARY TABLE {OBSERVED}{on_commit} AS "
            f"SELECT server_id, component, version, 0 AS gpu_count FROM ({_latest_server_obs()}) latest "
            f"UNION ALL {_gpu_groups()}")


def _version_keys(cursor: Any) -> None:
    """``compliance_version_keys(version, vkey)``: the key of every version observed now (a few tens: their
    keys are computed here in Python), a temporary table the status INSERT hash-joins (measured: a VALUES list
    there made PostgreSQL estimate one row and loop over it per row, 3 s at 100,000 GPUs)."""
    cursor.execute(f"SELECT DISTINCT version FROM {OBSERVED}")
    versions = sorted(row[0] for row in cursor.fetchall() if row[0])
    on_commit = " ON COMMIT DROP" if _postgres() else ""
    cursor.execute(f"CREATE TEMPORARY TABLE {VERSION_KEYS} (version varchar(80) PRIMARY KEY, vkey varchar(200))"
                   f"{on_commit}")
    if versions:
        cursor.execute(f"INSERT INTO {VERSION_KEYS} (version, vkey) VALUES {', '.join(['(%s, %s)'] * len(versions))}",
                       [p for v in versions for p in (v, version_key(v))])
    if _postgres():
        cursor.execute(f"ANALYZE {VERSION_KEYS}")  # ~1 ms; ANALYZE of OBSERVED cost 0.1 s and changed no plan


def _in_force(now_param: str) -> str:
    """The baseline in force per server: pool baselines before the platform's, newest start first."""
    return f"""
    server_baseline AS (
        SELECT server_id, baseline_id, bundle_id FROM (
            SELECT s.id AS server_id, b.id AS baseline_id, b.bundle_id,
                   ROW_NUMBER() OVER (PARTITION BY s.id ORDER BY (b.pool_id IS NULL), b.valid_from DESC, b.id) AS rn
            FROM {T['server']} s
            JOIN {T['baseline']} b ON b.platform_id = s.platform_id
            LEFT JOIN {T['pool_servers']} ps ON ps.pool_id = b.pool_id AND ps.server_id = s.id
            WHERE b.approved_by_id IS NOT NULL AND b.valid_from <= {now_param}
              AND (b.valid_to IS NULL OR b.valid_to > {now_param})
              AND (b.pool_id IS NULL OR ps.server_id IS NOT NULL)
        ) ranked WHERE rn = 1
    ),
    expected AS (
        SELECT sb.server_id, sb.baseline_id, i.component, r.version, r.version_key
        FROM server_baseline sb
        JOIN {T['item']} i ON i.bundle_id = sb.bundle_id
        JOIN {T['release']} r ON r.id = i.release_id
    )"""


def _status_sql() -> str:
    """Expected against observed: a server component's row even when nothing was observed (``unknown``); a
    per-GPU component's rows only for servers with GPUs, one per version they report. Inserted in the order of
    ``compliance_server_idx`` (appending to the index rather than descending it for every row)."""
    return f"""
        WITH {_in_force('%s')}
        INSERT INTO {T['status']} (server_id, component, baseline_id, expected, actual, status, gpu_count, computed_at)
        SELECT e.server_id, e.component, e.baseline_id, e.version, COALESCE(o.version, ''),
               CASE WHEN o.version IS NULL OR o.version = '' THEN 'unknown'
                    WHEN vk.vkey = e.version_key THEN 'compliant' ELSE 'drift' END,
               COALESCE(o.gpu_count, 0), %s
        FROM expected e
        LEFT JOIN {OBSERVED} o ON o.server_id = e.server_id AND o.component = e.component
        LEFT JOIN {VERSION_KEYS} vk ON vk.version = o.version
        WHERE o.server_id IS NOT NULL OR e.component NOT IN ({_in(PER_GPU)})
        ORDER BY e.server_id, e.component"""


def _tuple_sql() -> str:
    """``component=version;...`` per server, sorted; a component whose GPUs disagree lists its versions
    ``a|b``. On PostgreSQL one window pass (LAG marks where a component starts or repeats) and one aggregate per
    server: twice as fast as DISTINCT then an aggregate per (server, component) (measured, same output)."""
    items = f"SELECT server_id, component, LOWER(TRIM(version)) AS v FROM {OBSERVED} WHERE version <> ''"
    if _postgres():
        return f"""
        WITH ordered AS (
            SELECT server_id, component, v, LAG(component) OVER w AS pc, LAG(v) OVER w AS pv
            FROM ({items}) items WINDOW w AS (PARTITION BY server_id ORDER BY component, v)
        ), tuples AS (
            SELECT server_id,
                   SUBSTR(STRING_AGG(CASE WHEN pc = component AND pv = v THEN NULL WHEN pc = component THEN '|' || v
                                          ELSE ';' || component || '=' || v END, '' ORDER BY component, v), 2) AS text,
                   COALESCE(BOOL_OR(pc = component AND pv <> v), FALSE) AS mixed
            FROM ordered GROUP BY server_id
        )
        INSERT INTO {T['tuple']} (server_id, tuple_text, tuple_hash, mixed, computed_at)
        SELECT server_id, text, MD5(text), mixed, %s FROM tuples"""
    items = f"SELECT DISTINCT server_id, component, LOWER(TRIM(version)) AS v FROM {OBSERVED} WHERE version <> ''"
    # SQLite (the embedded demo default): GROUP_CONCAT keeps the order of an ordered subquery.
    return f"""
        WITH items AS ({items}),
        per_component AS (
            SELECT server_id, component, GROUP_CONCAT(v, '|') AS vs, COUNT(*) AS n
            FROM (SELECT * FROM items ORDER BY server_id, component, v) GROUP BY server_id, component
        ), tuples AS (
            SELECT server_id, GROUP_CONCAT(component || '=' || vs, ';') AS text, MAX(n > 1) AS mixed
            FROM (SELECT * FROM per_component ORDER BY server_id, component) GROUP BY server_id
        )
        INSERT INTO {T['tuple']} (server_id, tuple_text, tuple_hash, mixed, computed_at)
        SELECT server_id, text, MD5(text), mixed, %s FROM tuples"""


@transaction.atomic
def compliance_recompute() -> dict[str, Any]:
    """Rewrite ``ComplianceStatus`` and ``FirmwareTuple`` for the whole fleet. Returns the findings by status
    (a server component counts one, a per-GPU component one per GPU), the number of servers with a tuple, and
    the seconds it took. Safe to run twice, or concurrently (an advisory lock on PostgreSQL makes the second
    wait, then rewrite again)."""
    started = time.perf_counter()
    now = timezone.now()
    with connection.cursor() as cursor:
        if _postgres():
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('firmware.compliance_recompute'))")
            # The planner cannot estimate the CTEs; keep the sorts and hashes of ~100,000 rows in memory.
            cursor.execute("SET LOCAL work_mem = '64MB'")
            # Every join here is bulk (100,000 rows against 100,000 or against tens): hash joins. The estimates
            # of the baseline-in-force ranking are ~1 row, which made the planner loop per row (measured).
            cursor.execute("SET LOCAL enable_nestloop = off")
            # Derived tables rewritten whole: TRUNCATE (readers wait for the commit) rather than DELETE, which
            # would leave every old row dead.
            cursor.execute(f"TRUNCATE {T['status']}, {T['tuple']}")
        else:
            cursor.execute(f"DELETE FROM {T['status']}")
            cursor.execute(f"DELETE FROM {T['tuple']}")
        cursor.execute(_observed_sql())
        _version_keys(cursor)
        cursor.execute(_status_sql(), [now, now, now])
        cursor.execute(_tuple_sql(), [now])
        cursor.execute(f"DROP TABLE {OBSERVED}, {VERSION_KEYS}" if _postgres() else f"DROP TABLE {OBSERVED}")
        if not _postgres():
            cursor.execute(f"DROP TABLE {VERSION_KEYS}")
        cursor.execute(f"SELECT status, SUM(CASE WHEN gpu_count > 0 THEN gpu_count ELSE 1 END) FROM {T['status']} "
                       "GROUP BY status")
        counts = {status: int(n) for status, n in cursor.fetchall()}
        cursor.execute(f"SELECT COUNT(*) FROM {T['tuple']}")
        servers = cursor.fetchone()[0]
    return {"computed_at": now.isoformat(), "compliant": counts.get("compliant", 0), "drift": counts.get("drift", 0),
            "unknown": counts.get("unknown", 0), "servers_with_tuple": servers,
            "seconds": round(time.perf_counter() - started, 3)}
