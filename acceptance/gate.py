"""The burn-in gate: may this GPU leave burn-in (for service or the spares pool), or return to service from a drain?

Registered on inventory's lifecycle (``inventory.lifecycle.gate_register``) by ``AcceptanceConfig.ready()``, so the
page, the API, the admin and bulk actions all ask it. Evidence counts from the moment the GPU entered its current
state (burn-in, or the drain it returns from): a retest after a failure starts a new window.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError

from acceptance.models import AcceptanceCheck, BurnInPolicy, DiagnosticResult, RunGpu, Verdict
from acceptance.parsers import name_key
from inventory.models import Gpu, GpuState

# Without a policy row for the model or a fleet default, a GPU still needs one passing level-2 run.
BUILTIN_POLICY = BurnInPolicy(min_level=2, required_runs=1, min_hours=0, required_tests=[], required_checks=[],
                              return_min_level=2, return_runs=1, infant_days=90)


def policy_for(gpu_model_id: int | None) -> BurnInPolicy:
    policies = {p.gpu_model_id: p for p in BurnInPolicy.objects.filter(gpu_model_id__in=[gpu_model_id, None])}
    return policies.get(gpu_model_id) or policies.get(None) or BUILTIN_POLICY


@dataclass
class GateStatus:
    met: bool
    failed: bool  # the latest evidence in the window is a failure
    reasons: list[str] = field(default_factory=list)
    passing_runs: list[int] = field(default_factory=list)


def evaluate(gpu: Gpu, *, returning: bool | None = None, policy: BurnInPolicy | None = None) -> GateStatus:
    """What the GPU's evidence since it entered its current state says. ``returning``: judge by the return rules
    (a drained GPU going back to service); default from its state."""
    if gpu.state == GpuState.BURN_IN_FAILED:
        change = gpu.state_changes.filter(to_state=GpuState.BURN_IN_FAILED).order_by("-at", "-id").first()
        return GateStatus(met=False, failed=True, reasons=[(change.reason if change else "") or
                                                           "burn-in failed: retest or send to RMA"])
    policy = policy or policy_for(gpu.model_id)
    if returning is None:
        returning = gpu.state == GpuState.DRAINED
    since: dt.datetime | None = gpu.state_changed_at
    min_level = policy.return_min_level if returning else policy.min_level
    runs_needed = policy.return_runs if returning else policy.required_runs
    verdicts = (RunGpu.objects.filter(gpu_id=gpu.pk).select_related("run")
                .order_by("run__ran_at", "run_id"))
    if since is not None:
        verdicts = verdicts.filter(run__ran_at__gte=since)
    rows = list(verdicts)
    required = {name_key(t) for t in policy.required_tests or []}
    passed_tests: dict[int, set[str]] = {}
    if required and rows:
        for run_id, test in DiagnosticResult.objects.filter(
                gpu_id=gpu.pk, run_id__in=[r.run_id for r in rows], status__in=["pass", "warn"]).values_list(
                "run_id", "test"):
            passed_tests.setdefault(run_id, set()).add(name_key(test))
    reasons: list[str] = []
    passing = []
    for row in rows:
        if row.verdict != Verdict.PASS or row.run.level < min_level:
            continue
        missing = required - passed_tests.get(row.run_id, set())
        if missing:
            continue
        passing.append(row)
    failed = bool(rows) and rows[-1].verdict == Verdict.FAIL
    if failed:
        last = rows[-1]
        reasons.append(f"diagnostic run #{last.run_id} failed: {'; '.join(last.reasons[:3]) or 'see the run'}")
    if len(passing) < runs_needed:
        what = f"level {min_level}+" + (f" with {', '.join(sorted(required))}" if required else "")
        reasons.append(f"{len(passing)} of {runs_needed} passing {what} diagnostic run(s) since "
                       f"{'the drain' if returning else 'burn-in started'}")
    elif not returning and policy.min_hours and since is not None:
        hours = (passing[-1].run.ran_at - since).total_seconds() / 3600
        if hours < policy.min_hours:
            reasons.append(f"burn-in evidence covers {hours:.1f} h of the {policy.min_hours:g} h required")
    if not returning:
        for name in policy.required_checks or []:
            checks = AcceptanceCheck.objects.filter(gpu_id=gpu.pk, name=name)
            if since is not None:
                checks = checks.filter(measured_at__gte=since)
            latest = checks.order_by("-measured_at", "-id").first()
            if latest is None:
                reasons.append(f"no {name} result")
            elif not latest.passed:
                failed = True
                reasons.append(f"{name} failed ({latest.value if latest.value is not None else ''} "
                               f"{latest.unit}) {latest.details}".strip())
    return GateStatus(met=not reasons, failed=failed, reasons=reasons, passing_runs=[r.run_id for r in passing])


def burn_in_gate(gpu: Gpu, to_state: str) -> None:
    """The lifecycle guard: refuse leaving burn-in (or returning from a drain) without the policy's evidence."""
    status = evaluate(gpu)
    if not status.met:
        raise ValidationError(
            f"{gpu.identity} may not go to '{to_state}' yet: " + "; ".join(status.reasons) + ".",
            code="burn_in_gate")
