"""Wave gates: pass, fail (-> the strategy's ``on_failure``: pause or abort) or inconclusive (-> pause).

Per target (in the engine): the Redfish task completed without error and every targeted inventory item reports
the new version after activation. Per wave (here):
- any inconclusive target (a task stuck past its deadline) -> inconclusive;
- the canary: any firmware failure -> fail (every upgrade path must work once before a wave starts);
- other waves: firmware failures above ``max_failures`` or above ``max_failure_ratio`` of the finished targets,
  applied once ``min_sample`` targets finished -> fail;
- when every target is done: after ``soak_seconds``, no new hardware XID on the updated GPUs since they were
  updated (when telemetry is installed: ``telemetry.XidEvent``), and succeeded / finished >= ``success_threshold``.
Infrastructure failures never count as firmware failures; a wave where every target failed on infrastructure is
inconclusive. Failures acknowledged by an operator's resume (``gate_result.ack``) are not counted again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.db.models import Count, Min, Q

from firmware.models import ErrorClass, RolloutTarget, RolloutWave, TargetState
from firmware.models.rollout import TARGET_DONE
from firmware.services.plan import Strategy

PASS, FAIL, INCONCLUSIVE, WAIT = "pass", "fail", "inconclusive", "wait"


@dataclass
class WaveCounts:
    total: int = 0
    done: int = 0
    succeeded: int = 0
    skipped: int = 0
    firmware_failed: int = 0
    infra_failed: int = 0
    inconclusive: int = 0
    cancelled: int = 0

    @property
    def finished(self) -> int:
        """Targets with a firmware outcome: the denominator of ratios."""
        return self.succeeded + self.firmware_failed


@dataclass
class GateVerdict:
    outcome: str
    reason: str = ""
    counts: dict[str, Any] = field(default_factory=dict)


def wave_counts(wave: RolloutWave) -> WaveCounts:
    """One aggregate query over the wave's targets."""
    failed = Q(state=TargetState.FAILED)
    row = RolloutTarget.objects.filter(wave=wave).aggregate(
        total=Count("id"), done=Count("id", filter=Q(state__in=TARGET_DONE)),
        succeeded=Count("id", filter=Q(state=TargetState.SUCCEEDED)),
        skipped=Count("id", filter=Q(state=TargetState.SKIPPED)),
        firmware_failed=Count("id", filter=failed & Q(error_class=ErrorClass.FIRMWARE)),
        infra_failed=Count("id", filter=failed & Q(error_class=ErrorClass.INFRA)),
        inconclusive=Count("id", filter=failed & Q(error_class=ErrorClass.INCONCLUSIVE)),
        cancelled=Count("id", filter=Q(state=TargetState.CANCELLED)))
    return WaveCounts(**row)


def xid_during_soak(wave: RolloutWave) -> str:
    """A hardware XID on a GPU of a server this wave updated, since its update finished ("" if none, or if
    telemetry is not installed)."""
    try:
        xid_model = apps.get_model("telemetry", "XidEvent")
    except LookupError:
        return ""
    since = RolloutTarget.objects.filter(wave=wave, state=TargetState.SUCCEEDED).aggregate(m=Min("finished_at"))["m"]
    if since is None:
        return ""
    servers = RolloutTarget.objects.filter(wave=wave, state=TargetState.SUCCEEDED).values("server_id")
    event = (xid_model.objects.filter(hardware=True, at__gte=since, gpu__server_id__in=servers)
             .select_related("gpu", "gpu__server").order_by("at", "id").first())
    if event is None:
        return ""
    return f"hardware XID {event.xid} on {event.gpu.identity} ({event.gpu.server}) at {event.at:%Y-%m-%d %H:%M:%S}"


def wave_gate(*, wave: RolloutWave, strategy: Strategy, now: dt.datetime, is_canary: bool) -> GateVerdict:
    """The verdict for ``wave`` now (``WAIT``: not decided yet)."""
    c = wave_counts(wave)
    ack = (wave.gate_result or {}).get("ack", {})
    fw = max(0, c.firmware_failed - ack.get("firmware_failed", 0))
    inconclusive = max(0, c.inconclusive - ack.get("inconclusive", 0))
    counts = {**c.__dict__, "finished": c.finished}
    if inconclusive:
        return GateVerdict(INCONCLUSIVE, f"{inconclusive} target(s) inconclusive (a task or a check did not "
                                         "finish in time)", counts)
    if is_canary and fw:
        return GateVerdict(FAIL, f"canary: {fw} firmware failure(s)", counts)
    if not is_canary and c.finished >= strategy.min_sample and fw:
        if fw > strategy.max_failures:
            return GateVerdict(FAIL, f"{fw} firmware failures > {strategy.max_failures} allowed", counts)
        if fw / c.finished > strategy.max_failure_ratio:
            return GateVerdict(FAIL, f"firmware failure ratio {fw / c.finished:.1%} > "
                                     f"{strategy.max_failure_ratio:.1%}", counts)
    if c.done < c.total:
        return GateVerdict(WAIT, "targets in progress", counts)
    xid = xid_during_soak(wave)
    if xid:
        return GateVerdict(FAIL, xid, counts)
    if wave.soak_until and now < wave.soak_until:
        return GateVerdict(WAIT, "soaking", counts)
    if c.finished == 0:
        if c.infra_failed:
            return GateVerdict(INCONCLUSIVE, f"all {c.infra_failed} attempted target(s) failed on infrastructure",
                               counts)
        return GateVerdict(PASS, "nothing to update (all skipped or cancelled)", counts)
    rate = 100.0 * c.succeeded / c.finished
    if rate + 1e-9 < strategy.success_threshold:
        return GateVerdict(FAIL, f"success {rate:.1f}% < threshold {strategy.success_threshold:g}%", counts)
    return GateVerdict(PASS, f"success {rate:.1f}% ({c.succeeded}/{c.finished})", counts)
