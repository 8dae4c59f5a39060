"""GPU health: which GPUs to drain or return to the vendor, and why (``HealthFlag``).

``health_evaluate`` computes every criterion over the whole fleet with one query per criterion that returns
only the candidates (counts, peer medians and rates in SQL; the evidence put into words as JSON in Python: a
few hundred rows at 100,000 GPUs), loads them into a temporary table, then three statements raise, refresh and
clear flags; all in one transaction, serialised (an advisory lock on PostgreSQL, the write lock of SQLite's
IMMEDIATE transactions), so two evaluations never race. Criteria (numbers and sources:
``shared/design/reliability.md`` §3):

- ``row_remap_failure`` (rma): the row-remapping failure flag is set (``GpuLatest.remap_failure``). NVIDIA's
  RMA policy for HBM: "the RMA criteria is met when the row-remapping failure flag is set".
- ``sram_threshold`` (rma): the "SRAM Threshold Exceeded" flag (``GpuLatest.sram_threshold``).
- ``rma_xid`` (rma or drain): hardware XIDs of the last 7 days from NVIDIA's XID catalogue: 64 (remap
  failure, RMA), 48 with its 171/172 detail (DBE on DRAM / SRAM, RMA), 48 alone (drain), 79 (fell off the
  bus), 95 (uncontained memory error), 74 (NVLink), 140 (unrecovered ECC error escape): drain.
- ``error_rate`` (watch or drain): hardware error events per GPU-hour far above the GPU's model peers
  (:func:`poisson_tail`).
- ``thermal_outlier`` (watch or drain): hotter than its rack peers at similar power.

Application-caused XIDs (13, 31, 43, 45) never count: the SQL filters on ``hardware`` and on the XID numbers.
Flags are kept for GPUs in service or about to be (:data:`ACTIVE_STATES`). The two hardware-flag criteria never
clear by themselves: their flags close when the GPU leaves the active states (sent to RMA, decommissioned).
The others clear once the condition no longer holds (an XID flag 7 days after its last XID).

The same queries run on PostgreSQL and on the embedded SQLite (>= 3.39; no percentile function: the rack
peers' median is taken with ``row_number`` over the pairs).
"""

from __future__ import annotations

import collections
import datetime as dt
import itertools
import math
import time
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from fleet.audit import Actor
from inventory import services as inventory_services
from inventory.models import Gpu, GpuState
from telemetry.models import (
    APPLICATION_XIDS,
    GpuLatest,
    HealthFlag,
    HealthKind,
    HealthSeverity,
    XidEvent,
)

K, S = HealthKind, HealthSeverity

# GPUs whose health matters: in service or on the way there. Flags of GPUs outside these states clear.
ACTIVE_STATES = (GpuState.RECEIVED, GpuState.BURN_IN, GpuState.IN_SERVICE, GpuState.DRAINED, GpuState.SPARE)
# Hardware flags that stay raised until the GPU leaves the active states (NVIDIA: RMA criteria).
STICKY_KINDS = (K.ROW_REMAP_FAILURE, K.SRAM_THRESHOLD)

XID_WINDOW = dt.timedelta(days=7)
# XIDs that flag a GPU by themselves (NVIDIA XID catalogue, reliability.md §3.2): meaning, severity.
RMA_XIDS: dict[int, tuple[str, str]] = {
    64: ("row-remap failure", S.RMA),
    48: ("double-bit ECC error", S.DRAIN),  # RMA when 171/172 say where (below)
    79: ("GPU fell off the bus", S.DRAIN),
    95: ("uncontained memory error", S.DRAIN),
    74: ("NVLink error", S.DRAIN),
    140: ("unrecovered ECC error escape", S.DRAIN),
}
# Detail XIDs logged with a 48: which memory the DBE hit (the DRAM or the SRAM RMA path).
DBE_DETAIL_XIDS = {171: "DRAM", 172: "SRAM"}
DBE_DETAIL_WITHIN = dt.timedelta(minutes=2)
XIDS_IN_EVIDENCE = 20

# Error-rate outliers: see poisson_tail.
RATE_WINDOW = dt.timedelta(days=7)
RATE_MIN_EVENTS = 3
RATE_P_MAX = 1e-3
RATE_DRAIN_EVENTS, RATE_DRAIN_RATIO = 10, 10.0
# Peer rate used when the peers had no events at all: Llama 3's 0.173 job interruptions per GPU-year
# (reliability.md §1.1), about 2e-5 per GPU-hour, so "three events in a quiet fleet" still needs a test.
RATE_FLOOR_PER_H = 0.173 / 8766

# Thermal outliers: mean GPU temperature over the window minus the median of its rack peers drawing
# within +-15 % of its power; at least 3 such peers.
THERMAL_WINDOW = dt.timedelta(hours=24)
THERMAL_POWER_BAND = 0.15
THERMAL_MIN_PEERS = 3
THERMAL_WATCH_C, THERMAL_DRAIN_C = 8.0, 15.0


def poisson_tail(k: int, mu: float) -> float:
    """P(X >= k) for X ~ Poisson(mu): the chance a GPU with the peers' rate shows ``k`` or more events.

    Why this test and not "5 x the peer median": hardware errors are rare (Delta: one uncorrectable memory
    error per ~89,000 GPU-hours on H100), so the median GPU has no event in a week and any multiple of the
    median flags every GPU with a single event. The pooled rate of the GPU's model peers (leave-one-out,
    floored at :data:`RATE_FLOOR_PER_H`) times the GPU's own hours of telemetry is the count expected for
    it; the tail probability says how surprising its count is, and accounts for GPUs with partial telemetry.
    A flag needs p < 1e-3 AND at least 3 events: with a floor-level rate a week's mu is ~0.003, and
    P(X >= 3) ~ mu^3/6 ~ 6e-9, so 100,000 healthy GPUs give well under one false flag a week.
    Events, not counter increments (reliability.md §1.1: Delta counted 173,936 SBEs in 3,324 events): an
    hour with a DBE or an uncorrectable remap counts once, each hardware XID counts once.
    """
    if k <= 0:
        return 1.0
    if mu <= 0:
        return 0.0
    if mu >= k:  # not in the upper tail: 1 - CDF(k - 1) is accurate enough here
        term = cdf = math.exp(-mu)
        for i in range(1, k):
            term *= mu / i
            cdf += term
        return max(0.0, 1.0 - cdf)
    term = math.exp(-mu + k * math.log(mu) - math.lgamma(k + 1))
    total, i = 0.0, k
    while term > 1e-300 and (total == 0.0 or term > total * 1e-12):
        total += term
        i += 1
        term *= mu / i
    return min(1.0, total)


Candidate = tuple[int, str, str, dict[str, Any]]  # (gpu id, kind, severity, evidence)
REMAP_POLICY = ("NVIDIA RMA policy: the row-remapping failure flag is set (a bank with 8 uncorrectable-error rows "
                "remapped, a row remapped twice, or 512 remaps)")
SRAM_POLICY = ("NVIDIA RMA policy: SRAM Threshold Exceeded (more than 4 parity or 2 SECDED uncorrectable errors in "
               "one address bank)")


def _sql_states() -> str:
    return ", ".join(f"'{state.value}'" for state in ACTIVE_STATES)


def _app_xids() -> str:
    return ", ".join(str(x) for x in sorted(APPLICATION_XIDS))


def _dt(value: dt.datetime) -> Any:
    """A datetime parameter of raw SQL as the backend stores it (SQLite: naive UTC text)."""
    return connection.ops.adapt_datetimefield_value(value)


def _candidates_rma_flags() -> list[Candidate]:
    rows = (GpuLatest.objects.filter(Q(remap_failure=True) | Q(sram_threshold=True), gpu__state__in=ACTIVE_STATES)
            .order_by("gpu_id").values_list("gpu_id", "ts", "remap_unc", "remap_corr", "remap_failure",
                                            "sram_threshold"))
    candidates: list[Candidate] = []
    for gpu_id, ts, remap_unc, remap_corr, remap_failure, sram_threshold in rows:
        if remap_failure:
            candidates.append((gpu_id, K.ROW_REMAP_FAILURE, S.RMA, {
                "seen_at": ts.isoformat(), "remapped_rows_uncorrectable": remap_unc,
                "remapped_rows_correctable": remap_corr, "policy": REMAP_POLICY}))
        if sram_threshold:
            candidates.append((gpu_id, K.SRAM_THRESHOLD, S.RMA, {"seen_at": ts.isoformat(), "policy": SRAM_POLICY}))
    return candidates


def _candidates_xid(now: dt.datetime) -> list[Candidate]:
    """The RMA XIDs of the window per GPU, newest first; a 48 takes the 171/172 logged nearest to it (within
    :data:`DBE_DETAIL_WITHIN`) as its detail, which makes it an RMA. A few rows per flagged GPU: Python."""
    since = now - XID_WINDOW
    events = list(XidEvent.objects.filter(at__gt=since, at__lte=now, hardware=True, xid__in=list(RMA_XIDS),
                                          gpu__state__in=ACTIVE_STATES)
                  .exclude(xid__in=APPLICATION_XIDS).order_by("gpu_id", "-at", "-id")
                  .values_list("gpu_id", "xid", "at"))
    details: dict[int, list[tuple[dt.datetime, int, int]]] = collections.defaultdict(list)
    dbe_gpus = {gpu_id for gpu_id, xid, _ in events if xid == 48}
    if dbe_gpus:
        for gpu_id, xid, at, pk in (XidEvent.objects.filter(gpu_id__in=dbe_gpus, xid__in=list(DBE_DETAIL_XIDS),
                                                            at__gte=since - DBE_DETAIL_WITHIN,
                                                            at__lte=now + DBE_DETAIL_WITHIN)
                                    .order_by().values_list("gpu_id", "xid", "at", "id")):
            details[gpu_id].append((at, pk, xid))
    candidates: list[Candidate] = []
    for gpu_id, group in itertools.groupby(events, key=lambda event: event[0]):
        xids, severity = [], S.DRAIN
        for _, xid, at in group:
            meaning, xid_severity = RMA_XIDS[xid]
            detail = None
            if xid == 48:
                near = [(abs((d_at - at).total_seconds()), pk, d_xid) for d_at, pk, d_xid in details[gpu_id]
                        if abs(d_at - at) <= DBE_DETAIL_WITHIN]
                if near:
                    detail = DBE_DETAIL_XIDS[min(near)[2]]
                    xid_severity = S.RMA
            if xid_severity == S.RMA:
                severity = S.RMA
            xids.append({"xid": xid, "at": at.isoformat(), "meaning": meaning, "detail": detail})
        candidates.append((gpu_id, K.RMA_XID, severity, {
            "window_days": XID_WINDOW.days, "count": len(xids), "last_at": xids[0]["at"],
            "xids": xids[:XIDS_IN_EVIDENCE]}))
    return candidates


def _candidates_error_rate(cursor: Any, now: dt.datetime) -> list[Candidate]:
    """Counts per GPU in SQL; the Poisson tail (a few dozen candidates at most) in Python."""
    since = now - RATE_WINDOW
    cursor.execute(f"""
        WITH hours AS (
            SELECT gpu_id, count(*) AS hours,
                   count(CASE WHEN d_ecc_dbe > 0 THEN 1 END) AS dbe_hours,
                   count(CASE WHEN d_remap_unc > 0 THEN 1 END) AS remap_hours
            FROM telemetry_rollup1h WHERE bucket >= %s AND bucket < %s GROUP BY gpu_id
        ), xids AS (
            SELECT gpu_id, count(*) AS n FROM telemetry_xidevent
            WHERE at > %s AND at <= %s AND hardware AND xid NOT IN ({_app_xids()}) GROUP BY gpu_id
        ), per AS (
            SELECT g.id AS gpu_id, g.model_id, h.hours, h.dbe_hours, h.remap_hours, coalesce(x.n, 0) AS xids,
                   coalesce(x.n, 0) + h.dbe_hours + h.remap_hours AS events
            FROM hours h JOIN inventory_gpu g ON g.id = h.gpu_id AND g.state IN ({_sql_states()})
            LEFT JOIN xids x ON x.gpu_id = h.gpu_id
        ), peers AS (
            SELECT model_id, sum(events) AS events, sum(hours) AS hours, count(*) AS gpus FROM per GROUP BY model_id
        )
        SELECT p.gpu_id, p.events, p.hours, p.xids, p.dbe_hours, p.remap_hours,
               pe.events - p.events, pe.hours - p.hours, pe.gpus - 1, gm.name
        FROM per p JOIN peers pe ON pe.model_id = p.model_id JOIN inventory_gpumodel gm ON gm.id = p.model_id
        WHERE p.events >= %s ORDER BY p.gpu_id
    """, [_dt(since), _dt(now), _dt(since), _dt(now), RATE_MIN_EVENTS])
    candidates: list[Candidate] = []
    for gpu_id, events, hours, xids, dbe_hours, remap_hours, peer_events, peer_hours, peers, model in cursor.fetchall():
        events, hours, peer_events, peer_hours = int(events), int(hours), float(peer_events), float(peer_hours)
        peer_rate = max(peer_events / peer_hours if peer_hours else 0.0, RATE_FLOOR_PER_H)
        expected = peer_rate * hours
        p_value = poisson_tail(events, expected)
        if p_value >= RATE_P_MAX:
            continue
        rate = events / hours
        severity = S.DRAIN if events >= RATE_DRAIN_EVENTS and rate >= RATE_DRAIN_RATIO * peer_rate else S.WATCH
        candidates.append((gpu_id, K.ERROR_RATE, severity, {
            "window_days": RATE_WINDOW.days, "events": events, "hours": hours, "xid_events": int(xids),
            "dbe_hours": int(dbe_hours), "remap_hours": int(remap_hours),
            "rate_per_1000h": round(rate * 1000, 3), "peer_rate_per_1000h": round(peer_rate * 1000, 4),
            "expected": round(expected, 4), "p_value": float(f"{p_value:.3g}"), "peers": int(peers), "model": model,
        }))
    return candidates


def _candidates_thermal(cursor: Any, now: dt.datetime) -> list[Candidate]:
    """The rack peers' median by ``row_number`` over the pairs (the two middle values' mean for an even count,
    as ``percentile_cont(0.5)``), so one statement serves PostgreSQL and SQLite."""
    cursor.execute(f"""
        WITH w AS (
            SELECT r.gpu_id, avg(r.gpu_temp_avg) AS temp, avg(r.power_avg) AS power, count(*) AS hours
            FROM telemetry_rollup1h r
            WHERE r.bucket >= %s AND r.bucket < %s AND r.gpu_temp_avg IS NOT NULL AND r.power_avg IS NOT NULL
            GROUP BY r.gpu_id
        ), t AS (
            SELECT w.*, g.rack_id FROM w JOIN inventory_gpu g ON g.id = w.gpu_id
            WHERE g.rack_id IS NOT NULL AND g.state IN ({_sql_states()})
        ), pairs AS (
            SELECT a.gpu_id, a.rack_id, a.temp, a.power, a.hours, b.temp AS peer_temp, b.power AS peer_power,
                   row_number() OVER (PARTITION BY a.gpu_id ORDER BY b.temp) AS rn,
                   count(*) OVER (PARTITION BY a.gpu_id) AS peers
            FROM t a JOIN t b ON b.rack_id = a.rack_id AND b.gpu_id <> a.gpu_id
                             AND b.power BETWEEN a.power * (1 - %s) AND a.power * (1 + %s)
        ), cmp AS (
            SELECT gpu_id, rack_id, temp, power, hours, peers,
                   avg(CASE WHEN rn IN ((peers + 1) / 2, (peers + 2) / 2) THEN peer_temp END) AS peer_temp,
                   min(peer_power) AS peer_power_min, max(peer_power) AS peer_power_max
            FROM pairs WHERE peers >= %s
            GROUP BY gpu_id, rack_id, temp, power, hours, peers
        )
        SELECT c.gpu_id, c.temp, c.peer_temp, c.power, c.peer_power_min, c.peer_power_max, c.hours, c.peers, rk.name
        FROM cmp c JOIN inventory_rack rk ON rk.id = c.rack_id
        WHERE c.temp - c.peer_temp > %s ORDER BY c.gpu_id
    """, [_dt(now - THERMAL_WINDOW), _dt(now), THERMAL_POWER_BAND, THERMAL_POWER_BAND, THERMAL_MIN_PEERS,
          THERMAL_WATCH_C])
    candidates: list[Candidate] = []
    for gpu_id, temp, peer_temp, power, power_min, power_max, hours, peers, rack in cursor.fetchall():
        temp, peer_temp = float(temp), float(peer_temp)
        candidates.append((gpu_id, K.THERMAL_OUTLIER, S.DRAIN if temp - peer_temp > THERMAL_DRAIN_C else S.WATCH, {
            "window_hours": int(THERMAL_WINDOW.total_seconds() // 3600), "hours": int(hours),
            "temp_c": round(temp, 1), "peer_median_c": round(peer_temp, 1), "delta_c": round(temp - peer_temp, 1),
            "power_w": round(float(power)), "peer_power_w": [round(float(power_min)), round(float(power_max))],
            "peers": int(peers), "rack": rack}))
    return candidates


def health_evaluate(*, now: dt.datetime | None = None) -> dict[str, Any]:
    """Evaluate every criterion for the whole fleet; raise, refresh and clear ``HealthFlag`` rows.

    Returns counts: ``{"raised": n, "refreshed": n, "cleared": n, "candidates": {kind: n}, "ms": ...}``.
    Safe to run twice at once (the second waits for the first: an advisory lock on PostgreSQL, the write lock
    that SQLite's IMMEDIATE transactions take at BEGIN) and idempotent for the same ``now``.
    """
    started = time.perf_counter()
    now = now or timezone.now()
    postgres = connection.vendor == "postgresql"
    with transaction.atomic(), connection.cursor() as cursor:
        if postgres:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('fleet.health_evaluate'))")
        found = [*_candidates_rma_flags(), *_candidates_xid(now), *_candidates_error_rate(cursor, now),
                 *_candidates_thermal(cursor, now)]
        cursor.execute("DROP TABLE IF EXISTS _health_candidate")  # a caller's outer transaction kept it
        cursor.execute("CREATE TEMP TABLE _health_candidate (gpu_id bigint NOT NULL, kind text NOT NULL, "
                       f"severity text NOT NULL, evidence {'jsonb' if postgres else 'text'} NOT NULL)")
        if found:
            cursor.executemany(
                "INSERT INTO _health_candidate (gpu_id, kind, severity, evidence) VALUES (%s, %s, %s, %s)",
                [(gpu_id, str(kind), str(severity), connection.ops.adapt_json_value(evidence, None))
                 for gpu_id, kind, severity, evidence in found])
        cursor.execute("""
            UPDATE telemetry_healthflag AS f SET severity = c.severity, evidence = c.evidence, last_seen_at = %s
            FROM _health_candidate AS c
            WHERE f.gpu_id = c.gpu_id AND f.kind = c.kind AND f.cleared_at IS NULL
        """, [_dt(now)])
        refreshed = cursor.rowcount
        cursor.execute("""
            INSERT INTO telemetry_healthflag (gpu_id, kind, severity, evidence, raised_at, last_seen_at)
            SELECT c.gpu_id, c.kind, c.severity, c.evidence, %s, %s FROM _health_candidate AS c
            WHERE NOT EXISTS (SELECT 1 FROM telemetry_healthflag AS f
                              WHERE f.gpu_id = c.gpu_id AND f.kind = c.kind AND f.cleared_at IS NULL)
        """, [_dt(now), _dt(now)])
        raised = cursor.rowcount
        cursor.execute(f"""
            UPDATE telemetry_healthflag AS f SET cleared_at = %s
            WHERE f.cleared_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM _health_candidate AS c WHERE c.gpu_id = f.gpu_id AND c.kind = f.kind)
              AND (f.kind NOT IN (%s, %s)
                   OR EXISTS (SELECT 1 FROM inventory_gpu AS g WHERE g.id = f.gpu_id AND g.state NOT IN ({_sql_states()})))
        """, [_dt(now), *(str(kind) for kind in STICKY_KINDS)])
        cleared = cursor.rowcount
        cursor.execute("DROP TABLE _health_candidate")
    candidates = collections.Counter(str(kind) for _, kind, _, _ in found)
    return {"raised": raised, "refreshed": refreshed, "cleared": cleared, "candidates": dict(sorted(candidates.items())),
            "ms": round((time.perf_counter() - started) * 1000, 1)}


# --- evidence in words, and the one-click actions ------------------------------------------------------------

def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "?"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def evidence_text(kind: str, evidence: dict[str, Any]) -> str:
    """What an operator reads: why this GPU is flagged, with the numbers."""
    e = evidence or {}
    if kind == K.ROW_REMAP_FAILURE:
        return (f"Row-remap failure flag set ({_num(e.get('remapped_rows_uncorrectable'))} uncorrectable, "
                f"{_num(e.get('remapped_rows_correctable'))} correctable rows remapped): NVIDIA RMA criterion.")
    if kind == K.SRAM_THRESHOLD:
        return "SRAM threshold exceeded (uncorrectable SRAM errors in one bank): NVIDIA RMA criterion."
    if kind == K.RMA_XID:
        parts = []
        for x in (e.get("xids") or [])[:5]:
            detail = f" on {x['detail']}" if x.get("detail") else ""
            parts.append(f"XID {x['xid']} ({x.get('meaning', '')}{detail}) at {str(x.get('at', ''))[:16].replace('T', ' ')}")
        more = e.get("count", 0) - len(parts)
        tail = f" and {more} more" if more > 0 else ""
        return f"{'; '.join(parts)}{tail} in the last {e.get('window_days', 7)} days."
    if kind == K.ERROR_RATE:
        return (f"{e.get('events')} hardware error events in {e.get('hours')} GPU-hours "
                f"({_num(e.get('rate_per_1000h'), 2)} per 1000 h) vs {_num(e.get('peer_rate_per_1000h'), 3)} per 1000 h "
                f"for {e.get('peers')} {e.get('model', '')} peers (expected {e.get('expected', 0):.2g}, "
                f"p = {e.get('p_value')}).")
    if kind == K.THERMAL_OUTLIER:
        low, high = (e.get("peer_power_w") or [None, None])[:2]
        return (f"{_num(e.get('temp_c'))} °C mean over {e.get('window_hours', 24)} h, {_num(e.get('delta_c'))} °C "
                f"above the median ({_num(e.get('peer_median_c'))} °C) of {e.get('peers')} GPUs in rack "
                f"{e.get('rack')} at similar power ({_num(e.get('power_w'))} W; peers {_num(low)}-{_num(high)} W).")
    return str(e)


ACTIONS = {"drain": GpuState.DRAINED, "rma": GpuState.RMA}


def health_flag_act(*, flag: HealthFlag, action: str, actor: Actor | None) -> Gpu:
    """The one-click action on a flag: drain the GPU or send it to RMA through ``gpu_transition`` (audited;
    the lifecycle table decides what is legal and raises ``ValidationError`` otherwise). The reason quotes
    the flag's evidence."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    reason = f"Health flag #{flag.pk} {flag.get_kind_display()} ({flag.severity}): {evidence_text(flag.kind, flag.evidence)}"
    return inventory_services.gpu_transition(gpu=flag.gpu, to_state=ACTIONS[action], actor=actor, reason=reason[:500])
