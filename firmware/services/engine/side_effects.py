"""BMC side effects: staging updates and activation actions, recorded before they are sent, reconciled after."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from firmware.models import ErrorClass, RolloutTarget, TargetState, TargetStep, UpdateMethod
from firmware.redfish import BmcError, bmc_client
from firmware.services.engine import reconcile
from firmware.services.engine.context import StepContext, activation_actions
from firmware.services.engine.locks import is_postgres
from firmware.services.engine.outcomes import Outcome, fail, later
from fleet.execution import LostLease, Trace, Verdict, settle, settle_until


def client_for(target: RolloutTarget) -> Any:
    return bmc_client(target.server.bmc_address)


def record(target: RolloutTarget, key: str, kind: str, release_id: int | None) -> tuple[TargetStep, bool]:
    """Record a side effect BEFORE sending it: committed, and flushed to disk (``synchronous_commit`` on for
    this transaction), so no crash of the worker or of PostgreSQL forgets a request the BMC may have received."""
    with transaction.atomic():
        if is_postgres():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO on")
        try:
            with transaction.atomic():
                return TargetStep.objects.create(idem_key=key, target=target, release_id=release_id, kind=kind,
                                                 requested_at=timezone.now()), True
        except IntegrityError:
            pass
    return TargetStep.objects.get(idem_key=key), False


def task_result(target: RolloutTarget, step: TargetStep, task: Any, work: list[dict[str, Any]],
                 **step_fields: Any) -> Outcome:
    """A finished or running update task -> the target's next step (``step_fields``: more to write on the step)."""
    now = timezone.now()
    item = work[target.item_index]
    if not task.done:
        deadline = target.deadline_at or (now + dt.timedelta(seconds=settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS))
        if step_fields:
            TargetStep.objects.filter(pk=step.pk).update(**step_fields)
        if now >= deadline:
            TargetStep.objects.filter(pk=step.pk).update(outcome="timeout", messages=notes(step) + task.messages[-5:])
            return fail(target, ErrorClass.INCONCLUSIVE,
                         f"update task {task.uri} still {task.state} at {task.percent}% after "
                         f"{settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS}s", [])
        return later(target, task.retry_after or 1, deadline_at=deadline, bmc_task_uri=task.uri)
    TargetStep.objects.filter(pk=step.pk).update(**{**step_fields, "outcome": task.state.lower()[:20]},
                                                 finished_at=now, messages=notes(step) + task.messages[-10:])
    if not task.ok:
        aborted = any("TaskAborted" in m for m in task.message_ids) and not any(
            "Failed" in m for m in task.message_ids)
        if aborted:  # the BMC rebooted under the task: not the image's fault; an attempt, sent again if any are left
            attempts = target.attempts + 1
            if attempts >= settings.FLEET_ROLLOUT_ABORTED_ATTEMPTS:
                return fail(target, ErrorClass.INFRA, f"update task aborted {attempts} times: {task.failure()}", [],
                            attempts=attempts)
            TargetStep.objects.filter(pk=step.pk).update(idem_key=f"{step.idem_key}:aborted:{step.pk}")
            return later(target, 2, last_error=task.failure(), bmc_task_uri="", deadline_at=None,
                         attempts=attempts)
        return fail(target, ErrorClass.FIRMWARE, f"{item['component']} {item['version']}: {task.failure()}",
                     [item["release"]])
    nxt = target.item_index + 1
    if nxt < len(work):
        return Outcome(TargetState.STAGING, {"item_index": nxt, "bmc_task_uri": "", "deadline_at": None,
                                             "attempts": 0}, again_now=True)
    return Outcome(TargetState.DRAINING, {"item_index": 0, "bmc_task_uri": "", "deadline_at": None,
                                          "attempts": 0, "last_error": ""}, again_now=True)


def image_bytes(item: dict[str, Any]) -> bytes | None:
    """The uploaded image of a multipart push (a release with only a URL is pulled by the BMC instead)."""
    if item["method"] != UpdateMethod.MULTIPART_PUSH:
        return None
    from firmware.models import Release

    release = Release.objects.get(pk=item["release"])
    with release.image_file.open("rb") as handle:
        return handle.read()


def staging_step(target: RolloutTarget, ctx: StepContext) -> Outcome:
    """Stage the current bundle item: one update request per (target, release). A recorded request whose answer
    we do not have is never sent again until the BMC, asked after the settle period, shows it did not land
    (reconcile.py); if the BMC cannot tell, the target is inconclusive."""
    work = target.work
    item = work[target.item_index]
    client = client_for(target)
    key = f"{target.pk}:{item['release']}:update"
    step, to_send = ctx.step(target, key)
    if step is None:
        step, created = record(target, key, "update", item["release"])
        if not created:
            return later(target, 1)  # raced with another step; reconcile next time
        to_send = True
    if not to_send and step.outcome != NOT_SENT:
        task_uri = step.bmc_task_uri or target.bmc_task_uri
        if task_uri:
            try:
                return task_result(target, step, client.task(task_uri), work)
            except BmcError as exc:
                if exc.status != 404:
                    raise  # (a 404: the BMC purged or forgot the task: look for other evidence)
        found: list[reconcile.Found] = []

        def trace() -> Trace:
            found.append(reconcile.update_trace(client, item))
            return found[0].trace

        verdict = settle(sent_at=step.requested_at, settle_seconds=reconcile.settle_seconds(target.bmc_class),
                         reconcile=trace)
        if verdict == Verdict.WAIT:
            wait = (settle_until(step.requested_at, reconcile.settle_seconds(target.bmc_class))
                    - timezone.now()).total_seconds()
            return later(target, wait, last_error="an update request went unanswered: waiting for the BMC to "
                                                  "settle before asking it what it did")
        evidence = found[0].evidence if found else ""
        note(step, f"settled: {verdict} ({evidence})")
        if verdict == Verdict.FOUND:
            if found[0].task is not None:  # the request reached the BMC; its answer was lost: adopt its task
                TargetStep.objects.filter(pk=step.pk).update(bmc_task_uri=found[0].task.uri)
                step.bmc_task_uri = found[0].task.uri
                return task_result(target, step, found[0].task, work)
            return task_result(target, step, DoneTask(), work)
        if verdict == Verdict.INCONCLUSIVE or resends_exhausted(step):
            return fail(target, ErrorClass.INCONCLUSIVE, f"update of {item['component']} to {item['version']}: "
                        f"the BMC cannot show whether the unanswered request landed ({evidence})", [])
        note(step, RESENT)  # ABSENT: the BMC proves it did not land; sent again, each time only on such proof
    if not ctx.rollout_running(target.rollout_id):  # paused, aborted or demoted meanwhile: not sent
        TargetStep.objects.filter(pk=step.pk).update(outcome=NOT_SENT)
        return later(target, 5, last_error="held: the rollout is no longer running")
    ctx.claims.check(target)  # fenced: past our lease, or the row taken over -> LostLease, nothing sent
    mark_sending(step)
    try:
        accepted = client.update(image_uri=item["image"], targets=item["targets"], method=item["method"],
                                 stage=True, image=image_bytes(item))
    except BmcError as exc:
        mark_unanswered(step, exc)
        raise
    except BaseException as exc:  # interrupted waiting for the answer (the soft time limit, a signal)
        mark_unanswered(step, exc)
        raise
    sent = {"bmc_task_uri": accepted.task_uri, "response_status": accepted.status, "outcome": "sent"}
    step.bmc_task_uri = accepted.task_uri
    if accepted.task is not None and accepted.task.done:
        return task_result(target, step, accepted.task, work, **sent)
    if not accepted.task_uri:
        return task_result(target, step, DoneTask(), work, **sent)  # 204 without a task: accepted and done
    TargetStep.objects.filter(pk=step.pk).update(**sent)
    retry = accepted.task.retry_after if accepted.task and accepted.task.retry_after else 1
    return later(target, retry, bmc_task_uri=accepted.task_uri, last_error="",
                 deadline_at=timezone.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS))


NOT_SENT = "not_sent"
AMBIGUOUS = "ambiguous"
RESENT = "resent: the BMC showed no trace after the settle period"


def resends_exhausted(step: TargetStep) -> bool:
    """Each resend needs the BMC's proof that the last request did not land (a worker killed between the record
    and the send leaves exactly that); a BMC that keeps dropping requests stops after
    ``FLEET_BMC_MAX_RESENDS`` of them and the target is inconclusive."""
    return sum(m == RESENT for m in step.messages) >= settings.FLEET_BMC_MAX_RESENDS


def notes(step: TargetStep) -> list[str]:
    """The engine's own lines in a step's messages (kept when the BMC's task messages are stored)."""
    return [m for m in step.messages if isinstance(m, str)][-10:]


def note(step: TargetStep, message: str) -> None:
    """Add a line to the step's messages (RESENT and evidence lines verbatim: they are looked for)."""
    line = message if message == RESENT or message.startswith(reconcile.EVIDENCE) else \
        f"{timezone.now():%H:%M:%S} {message}"[:300]
    step.messages = [*step.messages, line][-20:]
    with transaction.atomic():
        if is_postgres() and line.startswith(reconcile.EVIDENCE):  # evidence is flushed before the reset is sent
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO on")
        TargetStep.objects.filter(pk=step.pk).update(messages=step.messages)


def mark_sending(step: TargetStep) -> None:
    """The settle period of a request that is never answered counts from when it left, not from when the chunk
    recorded it (a chunk records its targets' requests at once, then sends them one by one for up to half the
    soft time limit): stamped just before the send. A worker killed while waiting leaves this stamp."""
    step.requested_at = timezone.now()
    TargetStep.objects.filter(pk=step.pk).update(requested_at=step.requested_at)


def mark_unanswered(step: TargetStep, exc: BaseException) -> None:
    """A request that failed: NOT_SENT when the BMC did not process it (refused, 503), AMBIGUOUS when it may have
    (the answer was lost, or the wait for it was interrupted by the soft time limit: settle, then reconcile).
    The settle period counts from now: a BMC may still be working on a request its client gave up on."""
    outcome = AMBIGUOUS if getattr(exc, "ambiguous", True) else NOT_SENT
    step.outcome, step.requested_at = outcome, timezone.now()
    why = exc if isinstance(exc, BmcError) else f"interrupted waiting for the answer ({type(exc).__name__})"
    step.messages = [*step.messages, f"{timezone.now():%H:%M:%S} {outcome}: {why}"[:300]][-20:]
    TargetStep.objects.filter(pk=step.pk).update(outcome=outcome, requested_at=step.requested_at,
                                                 messages=step.messages)


class DoneTask:
    uri = ""
    state = "Completed"
    status = "OK"
    done = True
    ok = True
    percent = 100
    retry_after = None
    messages: list[dict[str, Any]] = []
    message_ids: list[str] = []


def activating_step(target: RolloutTarget, ctx: StepContext) -> Outcome:
    """One side effect per step: Activate the staged images, then each reset their activation needs. Each is
    recorded before it is sent, and sent at most once per activation: a recorded action without an answer is
    settled and reconciled (a reset: the BMC's LastResetTime, read just before it was sent) like an update."""
    client = client_for(target)
    work = target.work
    for action in activation_actions(work):
        key = f"{target.pk}:{action}"
        step, to_send = ctx.step(target, key)
        if step is not None and step.response_status is not None:
            continue  # sent and confirmed
        if step is None:
            step, created = record(target, key, "activate" if action == "activate" else "reset", None)
            if not created:
                return later(target, 1)
            to_send = True
        if not to_send and step.outcome != NOT_SENT:
            outcome = settle_action(target, client, step, action, work)
            if outcome is not None:
                return outcome
            if step.response_status is not None:
                continue  # found: it happened
        kind = action.split(":", 1)[1] if action.startswith("reset:") else ""
        ctx.claims.check(target)
        try:
            if kind:  # evidence first: what the BMC says its last reset was, just before this one
                note(step, reconcile.EVIDENCE + reconcile.last_reset(client, kind))
                ctx.claims.check(target)
            mark_sending(step)
            status = send_action(client, action, work)
        except LostLease:
            raise  # fenced before the send: nothing sent, the step is another worker's now
        except BaseException as exc:  # a BMC error, or interrupted (the soft time limit, a signal)
            mark_unanswered(step, exc)
            raise
        TargetStep.objects.filter(pk=step.pk).update(response_status=status, outcome="sent",
                                                     finished_at=timezone.now())
        if kind:
            client.session.expect_reboot()  # its 404s and refusals are the reboot, not the firmware
        wait = 2 if action in ("reset:bmc_reset", "reset:ac_power_cycle") else 0
        if wait:
            return later(target, wait)
        return Outcome(TargetState.ACTIVATING, {}, again_now=True)
    deadline = timezone.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_VERIFY_SECONDS)
    return Outcome(TargetState.VERIFYING, {"deadline_at": deadline}, again_now=True)


def settle_action(target: RolloutTarget, client: Any, step: TargetStep, action: str,
                  work: list[dict[str, Any]]) -> Outcome | None:
    """An activation action recorded without an answer: wait, found (confirmed: None), absent (send: None),
    or inconclusive."""
    seconds = reconcile.settle_seconds(target.bmc_class)
    found: list[reconcile.Found] = []

    def trace() -> Trace:
        kind = action.split(":", 1)[1] if action.startswith("reset:") else ""
        found.append(reconcile.reset_trace(client, step, kind) if kind else reconcile.activate_trace(client, work))
        return found[0].trace

    verdict = settle(sent_at=step.requested_at, settle_seconds=seconds, reconcile=trace)
    if verdict == Verdict.WAIT:
        wait = (settle_until(step.requested_at, seconds) - timezone.now()).total_seconds()
        return later(target, wait, last_error=f"{action} went unanswered: waiting for the BMC to settle")
    evidence = found[0].evidence if found else ""
    note(step, f"settled: {verdict} ({evidence})")
    if verdict == Verdict.FOUND:
        step.response_status = 0
        TargetStep.objects.filter(pk=step.pk).update(response_status=0, outcome="found", finished_at=timezone.now())
        return None
    if verdict == Verdict.INCONCLUSIVE or resends_exhausted(step):
        return fail(target, ErrorClass.INCONCLUSIVE, f"{action}: the BMC cannot show whether the unanswered "
                    f"request happened ({evidence})", [])
    note(step, RESENT)
    return None


def send_action(client: Any, action: str, work: list[dict[str, Any]]) -> int:
    if action == "activate":
        return client.activate(sorted({t for w in work for t in w["targets"]}))
    kind = action.split(":", 1)[1]
    related = sorted({r for w in work if w["activation"] == kind for r in w.get("related", [])})
    return client.reset(kind, related=related)
