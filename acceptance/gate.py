"""The burn-in gate: may this GPU leave burn-in (for service or the spares pool), or return to service from a drain?

Registered on inventory's lifecycle (``inventory.lifecycle.gate_register``) by ``AcceptanceConfig.ready()``, so the
page, the API, the admin and bulk actions all ask it. Evidence counts from the moment the GPU entered its current
state (burn-in, or the drain it returns from): a retest after a failure starts a new window.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db.models import Q

from acceptance.models import AcceptanceCheck, BurnInPolicy, DiagnosticResult, RunGpu, Verdict
from acceptance.parsers import name_key
from fleet.kept import KeptRead
from inventory.models import Gpu, GpuState, GpuStateChange

# Without a policy row for the model or a fleet default, a GPU still needs one passing level-2 run.
BUILTIN_POLICY = BurnInPolicy(min_level=2, required_runs=1, min_hours=0, required_tests=[], required_checks=[],
                              return_min_level=2, return_runs=1, infant_days=90)


def policies_for(gpu_model_ids: Iterable[int | None]) -> dict[int | None, BurnInPolicy]:
    """The policy each model goes by (its own, else the fleet default, else the built-in one): one query, none
    when no model is asked for."""
    wanted = set(gpu_model_ids)
    if not wanted:
        return {}
    # (``gpu_model_id__in=[m, None]`` would drop the None: SQL's IN never matches NULL, so the default needs its Q)
    return _policies(BurnInPolicy.objects.filter(
        Q(gpu_model_id__in=[m for m in wanted if m is not None]) | Q(gpu_model__isnull=True)).order_by("id"), wanted)


# One model's policy and the fleet default: read on every view of a GPU page, the statement is kept (fleet.kept).
_model_policies = KeptRead(lambda gpu_model_id: BurnInPolicy.objects.filter(
    Q(gpu_model_id=gpu_model_id) | Q(gpu_model__isnull=True)).order_by("id"))


def policy_for(gpu_model_id: int | None) -> BurnInPolicy:
    if gpu_model_id is None:
        return policies_for([None])[None]
    return _policies(_model_policies(gpu_model_id), {gpu_model_id})[gpu_model_id]


def _policies(rows: Iterable[BurnInPolicy], wanted: set[int | None]) -> dict[int | None, BurnInPolicy]:
    """Of the policy rows read, the one each wanted model goes by."""
    by_model = {p.gpu_model_id: p for p in rows}
    fallback = by_model.get(None) or BUILTIN_POLICY
    return {m: by_model.get(m) or fallback for m in wanted}


@dataclass
class GateStatus:
    met: bool
    failed: bool  # the latest evidence in the window is a failure
    reasons: list[str] = field(default_factory=list)
    passing_runs: list[int] = field(default_factory=list)


@dataclass
class Evidence:
    """A GPU's verdicts (each with its run) and checks as its caller read them, newest first, when they hold every
    one since the GPU's window opened (:func:`evidence_covers`): the gate judges by them and reads neither."""

    verdicts: list[RunGpu]
    checks: list[AcceptanceCheck]


def evidence_covers(gpu: Gpu, *, verdicts: list[RunGpu], checks: list[AcceptanceCheck], limit: int) -> bool:
    """Whether the ``limit`` newest verdicts and checks read (newest first) hold all of the GPU's window: fewer
    were found, or the oldest of them is older than the window."""
    since = gpu.state_changed_at
    return ((len(verdicts) < limit or (since is not None and verdicts[-1].run.ran_at < since))
            and (len(checks) < limit or (since is not None and checks[-1].measured_at < since)))


def evaluate(gpu: Gpu, *, returning: bool | None = None, policy: BurnInPolicy | None = None,
             evidence: Evidence | None = None) -> GateStatus:
    """What the GPU's evidence since it entered its current state says. ``returning``: judge by the return rules
    (a drained GPU going back to service); default from its state. ``evidence``: its verdicts and checks, read by
    the caller (the GPU page shows them)."""
    policies = {gpu.model_id: policy} if policy is not None else None
    return evaluate_many([gpu], returning=returning, policies=policies,
                         evidence={gpu.pk: evidence} if evidence is not None else None)[gpu.pk]


def evaluate_many(gpus: Iterable[Gpu], *, returning: bool | None = None,
                  policies: dict[int | None, BurnInPolicy] | None = None,
                  evidence: dict[int, Evidence] | None = None) -> dict[int, GateStatus]:
    """:func:`evaluate` for a group of GPUs (a delivery, a rack) in at most five queries, however many GPUs:
    policies, the reasons of failed burn-ins, the verdicts in each GPU's window, the passed tests of those runs
    (when a policy requires tests) and the latest required checks (when a policy requires checks). The verdicts
    and checks of GPUs in ``evidence`` are not read again."""
    gpus = list(gpus)
    evidence = evidence or {}
    out: dict[int, GateStatus] = {}
    failed_ids = [g.pk for g in gpus if g.state == GpuState.BURN_IN_FAILED]
    if failed_ids:
        why: dict[int, str] = {}
        for gpu_id, reason in GpuStateChange.objects.filter(gpu_id__in=failed_ids, to_state=GpuState.BURN_IN_FAILED
                                                           ).order_by("gpu_id", "-at", "-id").values_list("gpu_id",
                                                                                                        "reason"):
            why.setdefault(gpu_id, reason)
        for gpu_id in failed_ids:
            out[gpu_id] = GateStatus(met=False, failed=True,
                                     reasons=[why.get(gpu_id) or "burn-in failed: retest or send to RMA"])
    judged = [g for g in gpus if g.pk not in out]
    if not judged:
        return out
    policies = {**policies_for({g.model_id for g in judged} - set(policies or {})), **(policies or {})}
    # Evidence counts from the moment each GPU entered its current state; one query from the earliest of them.
    unread = [g for g in judged if g.pk not in evidence]
    starts = [g.state_changed_at for g in unread]
    rows: dict[int, list[RunGpu]] = {}
    if unread:
        verdicts = RunGpu.objects.filter(gpu_id__in=[g.pk for g in unread]).select_related("run").order_by(
            "run__ran_at", "run_id")
        if all(s is not None for s in starts):
            verdicts = verdicts.filter(run__ran_at__gte=min(starts))  # type: ignore[type-var]
        for row in verdicts:
            rows.setdefault(row.gpu_id, []).append(row)
    for gpu_id, given in evidence.items():  # oldest first, as the query orders them
        rows[gpu_id] = sorted(given.verdicts, key=lambda r: (r.run.ran_at, r.run_id))
    for gpu in judged:
        since = gpu.state_changed_at
        rows[gpu.pk] = [r for r in rows.get(gpu.pk, []) if since is None or r.run.ran_at >= since]
    passed_tests: dict[int, dict[int, set[str]]] = {g.pk: {} for g in judged}  # gpu -> run -> tests passed
    if any(policies[g.model_id].required_tests and rows[g.pk] for g in judged):
        for gpu_id, run_id, test in DiagnosticResult.objects.filter(
                gpu_id__in=[g.pk for g in judged], run_id__in={r.run_id for g in judged for r in rows[g.pk]},
                status__in=["pass", "warn"]).values_list("gpu_id", "run_id", "test"):
            passed_tests[gpu_id].setdefault(run_id, set()).add(name_key(test))
    returns = {g.pk: (g.state == GpuState.DRAINED) if returning is None else returning for g in judged}
    names = {n for g in judged if not returns[g.pk] for n in policies[g.model_id].required_checks or []}
    latest: dict[int, dict[str, AcceptanceCheck]] = {g.pk: {} for g in judged}  # gpu -> check name -> latest
    if names:
        checks: Iterable[AcceptanceCheck] = [c for g in judged if g.pk in evidence and not returns[g.pk]
                                             for c in evidence[g.pk].checks if c.name in names]  # newest first
        asked = [g.pk for g in unread if not returns[g.pk]]
        if asked:
            read = AcceptanceCheck.objects.filter(gpu_id__in=asked, name__in=names).order_by("-measured_at", "-id")
            if all(s is not None for s in starts):
                read = read.filter(measured_at__gte=min(starts))  # type: ignore[type-var]
            checks = [*checks, *read]
        since_of = {g.pk: g.state_changed_at for g in judged}
        for check in checks:
            since = since_of[check.gpu_id]
            if since is None or check.measured_at >= since:
                latest[check.gpu_id].setdefault(check.name, check)
    for gpu in judged:
        out[gpu.pk] = _judge(gpu, policies[gpu.model_id], returns[gpu.pk], rows[gpu.pk], passed_tests[gpu.pk],
                             latest[gpu.pk])
    return out


def _judge(gpu: Gpu, policy: BurnInPolicy, returning: bool, rows: list[RunGpu], passed_tests: dict[int, set[str]],
           checks: dict[str, AcceptanceCheck]) -> GateStatus:
    """The gate's rules over one GPU's evidence in its window (runs oldest first, latest check per name)."""
    since: dt.datetime | None = gpu.state_changed_at
    min_level = policy.return_min_level if returning else policy.min_level
    runs_needed = policy.return_runs if returning else policy.required_runs
    required = {name_key(t) for t in policy.required_tests or []}
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
            latest = checks.get(name)
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
