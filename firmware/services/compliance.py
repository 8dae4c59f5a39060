"""Compliance: every in-scope server and GPU against the baseline in force, computed set-based in SQL.

``compliance_recompute()`` rewrites two derived tables in one transaction, with a constant number of
statements whatever the fleet size (measured: bench/firmware.py, docs in the function):

- ``ComplianceStatus``: for each server whose platform has a baseline in force now (approved, inside its
  validity window; a pool's baseline wins over the platform-wide one), one row per bundle component on the
  server, and one per GPU for the per-GPU components (VBIOS, InfoROM), with the expected and the observed
  version and ``compliant`` / ``drift`` / ``unknown``. Server components are read from the latest
  observation per (server, component); GPU components from the GPU's ``vbios_version`` / ``inforom_image``
  columns, which the imports and ``firmware_observe`` keep on the latest observation.
- ``FirmwareTuple``: each server's firmware identity (every catalogued component's current versions,
  lower-cased, hashed), for scheduler labels and the mixed-firmware findings.

Versions compare by ``version_key`` (case, zero padding and VBIOS hex groups handled): the distinct observed
versions are few (tens), so their keys are computed in Python and joined in as a VALUES list.
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


def _latest_server_obs() -> str:
    """The latest observation per (server, component) of the catalogued server components."""
    server_components = _in(CATALOGUED - PER_GPU)
    if _postgres():
        return (f"SELECT DISTINCT ON (server_id, component) server_id, component, version FROM {T['obs']} "
                f"WHERE server_id IS NOT NULL AND component IN ({server_components}) "
                "ORDER BY server_id, component, last_seen DESC, id DESC")
    return (f"SELECT server_id, component, version FROM (SELECT server_id, component, version, ROW_NUMBER() OVER "
            "(PARTITION BY server_id, component ORDER BY last_seen DESC, id DESC) AS rn "
            f"FROM {T['obs']} WHERE server_id IS NOT NULL AND component IN ({server_components})) WHERE rn = 1")


def _version_keys(cursor: Any) -> tuple[str, list[Any]]:
    """``vk(version, vkey)`` as a VALUES list of every version observed now, and its parameters."""
    cursor.execute(
        f"SELECT version FROM {T['obs']} WHERE server_id IS NOT NULL AND component IN ({_in(CATALOGUED - PER_GPU)}) "
        f"UNION SELECT vbios_version FROM {T['gpu']} WHERE server_id IS NOT NULL "
        f"UNION SELECT inforom_image FROM {T['gpu']} WHERE server_id IS NOT NULL")
    versions = [row[0] for row in cursor.fetchall() if row[0]]
    rows = [("", "")] + [(v, version_key(v)) for v in versions]  # never an empty VALUES list
    values = ", ".join(["(%s, %s)"] * len(rows))
    return f"vk(version, vkey) AS (VALUES {values})", [p for row in rows for p in row]


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


def _status_case(actual: str, expected_key: str) -> str:
    return (f"CASE WHEN {actual} IS NULL OR {actual} = '' THEN 'unknown' "
            f"WHEN vk.vkey = {expected_key} THEN 'compliant' ELSE 'drift' END")


def _tuple_sql() -> str:
    items = f"""
        SELECT server_id, component, LOWER(TRIM(version)) AS v FROM latest
        UNION SELECT server_id, '{FirmwareComponent.GPU_VBIOS.value}', LOWER(TRIM(vbios_version)) FROM {T['gpu']}
            WHERE server_id IS NOT NULL AND vbios_version <> ''
        UNION SELECT server_id, '{FirmwareComponent.GPU_INFOROM_IMAGE.value}', LOWER(TRIM(inforom_image))
            FROM {T['gpu']} WHERE server_id IS NOT NULL AND inforom_image <> ''"""
    if _postgres():
        return f"""
        WITH latest AS ({_latest_server_obs()}), items AS ({items}),
        per_component AS (
            SELECT server_id, component, STRING_AGG(v, '|' ORDER BY v) AS vs, COUNT(*) AS n
            FROM items GROUP BY server_id, component
        ), tuples AS (
            SELECT server_id, STRING_AGG(component || '=' || vs, ';' ORDER BY component) AS text,
                   BOOL_OR(n > 1) AS mixed
            FROM per_component GROUP BY server_id
        )
        INSERT INTO {T['tuple']} (server_id, tuple_text, tuple_hash, mixed, computed_at)
        SELECT server_id, text, MD5(text), mixed, %s FROM tuples"""
    # SQLite (the embedded demo default): GROUP_CONCAT keeps the order of an ordered subquery.
    return f"""
        WITH latest AS ({_latest_server_obs()}), items AS ({items}),
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
    """Rewrite ``ComplianceStatus`` and ``FirmwareTuple`` for the whole fleet. Returns the counts by status,
    the number of servers with a tuple, and the seconds it took. Safe to run twice, or concurrently (an
    advisory lock on PostgreSQL makes the second wait, then rewrite again)."""
    started = time.perf_counter()
    now = timezone.now()
    with connection.cursor() as cursor:
        if _postgres():
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('firmware.compliance_recompute'))")
            # The planner cannot estimate the CTEs; sorts of ~100,000 rows spilled to disk at the default 4 MB.
            cursor.execute("SET LOCAL work_mem = '64MB'")
            # A derived table rewritten whole: TRUNCATE (readers wait for the commit, at most the ~1 s this
            # takes) rather than DELETE, which would leave 300,000 dead rows per run at 100,000 GPUs.
            cursor.execute(f"TRUNCATE {T['status']}, {T['tuple']}")
        else:
            cursor.execute(f"DELETE FROM {T['status']}")
            cursor.execute(f"DELETE FROM {T['tuple']}")
        vk_cte, vk_params = _version_keys(cursor)
        gpu_actual = (f"CASE e.component WHEN '{FirmwareComponent.GPU_VBIOS.value}' THEN g.vbios_version "
                      "ELSE g.inforom_image END")
        cursor.execute(f"""
            WITH {vk_cte}, latest AS ({_latest_server_obs()}), {_in_force('%s')}
            INSERT INTO {T['status']} (server_id, gpu_id, component, baseline_id, expected, actual, status, computed_at)
            SELECT e.server_id, NULL, e.component, e.baseline_id, e.version, COALESCE(l.version, ''),
                   {_status_case('l.version', 'e.version_key')}, %s
            FROM expected e
            LEFT JOIN latest l ON l.server_id = e.server_id AND l.component = e.component
            LEFT JOIN vk ON vk.version = l.version
            WHERE e.component NOT IN ({_in(PER_GPU)})
            UNION ALL
            SELECT e.server_id, g.id, e.component, e.baseline_id, e.version, {gpu_actual},
                   {_status_case(gpu_actual, 'e.version_key')}, %s
            FROM expected e
            JOIN {T['gpu']} g ON g.server_id = e.server_id
            LEFT JOIN vk ON vk.version = {gpu_actual}
            WHERE e.component IN ({_in(PER_GPU)})
        """, [*vk_params, now, now, now, now])
        cursor.execute(_tuple_sql(), [now])
        cursor.execute(f"SELECT status, COUNT(*) FROM {T['status']} GROUP BY status")
        counts = dict(cursor.fetchall())
        cursor.execute(f"SELECT COUNT(*) FROM {T['tuple']}")
        servers = cursor.fetchone()[0]
    return {"computed_at": now.isoformat(), "compliant": counts.get("compliant", 0), "drift": counts.get("drift", 0),
            "unknown": counts.get("unknown", 0), "servers_with_tuple": servers,
            "seconds": round(time.perf_counter() - started, 3)}
