"""BMC side effects: staging updates and activation actions, recorded before they are sent, reconciled after."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now

from firmware.models import ErrorClass, RolloutTarget, TargetState, TargetStep, UpdateMethod
from firmware.redfish import BmcError, bmc_client
from firmware.services.catalog import release_image_refusal
from firmware.services.engine import clock, reconcile
from firmware.services.engine.context import StepContext, activation_actions
from firmware.services.engine.locks import is_postgres
from firmware.services.engine.outcomes import Outcome, fail, later
from fleet.execution import LostLease, Trace
from fleet.redfish import strip_prefix


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
                                                 requested_at=clock.now()), True
        except IntegrityError:
            pass
    return TargetStep.objects.get(idem_key=key), False


def task_result(target: RolloutTarget, step: TargetStep, task: Any, work: list[dict[str, Any]],
                 **step_fields: Any) -> Outcome:
    """A finished or running update task -> the target's next step (``step_fields``: more to write on the step)."""
    now = clock.now()
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
    """Stage the current bundle item: one update request per (target, release). A request marked as leaving whose
    answer we do not have is never sent again unless the BMC, asked after the settle period, proves it did not
    land (reconcile.py); when the standard evidence cannot tell, the target waits longer, asks again, then is held
    for a person with the evidence."""
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
    if not to_send and step.outcome == FOUND:  # a person checked the BMC and found it landed: verification decides
        return task_result(target, step, DoneTask(), work)
    if not to_send and step.outcome not in NEVER_LEFT:
        task_uri = step.bmc_task_uri or target.bmc_task_uri
        if task_uri and step.outcome != AMBIGUOUS:
            try:
                return task_result(target, step, client.task(task_uri), work)
            except BmcError as exc:
                if exc.status != 404 or step.response_status is None:
                    raise
                # Accepted (we hold its 202) and its task is gone: finished and purged, or forgotten by a reboot.
                # It is not sent again; verification (every item at the new version) is the proof.
                note(step, f"task {task_uri} gone after the BMC accepted the update: verification decides")
                return task_result(target, step, DoneTask(), work)
        exclude = set(TargetStep.objects.filter(target_id=target.pk).exclude(pk=step.pk).exclude(bmc_task_uri="")
                      .values_list("bmc_task_uri", flat=True))  # tasks of earlier attempts are not this request's
        verdict = settle_step(target, step, lambda: reconcile.update_trace(
            client, item, exclude=exclude, elapsed=clock.since(step.requested_at), bmc_class=target.bmc_class))
        if isinstance(verdict, Outcome):
            return verdict
        if verdict.trace == Trace.FOUND:
            if verdict.task is not None:  # the request reached the BMC; its answer was lost: adopt its task
                TargetStep.objects.filter(pk=step.pk).update(bmc_task_uri=verdict.task.uri)
                step.bmc_task_uri = verdict.task.uri
                return task_result(target, step, verdict.task, work)
            return task_result(target, step, DoneTask(), work)
        # ABSENT: the BMC proves it did not land; sent again, each time only on such proof (bounded)
        if resends_exhausted(step):
            return fail(target, ErrorClass.INCONCLUSIVE, f"update of {item['component']} to {item['version']}: "
                        f"{settings.FLEET_BMC_MAX_RESENDS} requests went unanswered and did not land", [])
        note(step, RESENT)
    if not ctx.rollout_running(target.rollout_id):  # paused, aborted or demoted meanwhile: not sent
        TargetStep.objects.filter(pk=step.pk).update(outcome=NOT_SENT)
        return later(target, 5, last_error="held: the rollout is no longer running")
    ctx.claims.check(target)  # fenced: past our lease, or the row taken over -> LostLease, nothing sent
    image = image_bytes(item)
    if (refusal := release_image_refusal(release_id=item["release"], image=image)) is not None:  # h21 hook
        TargetStep.objects.filter(pk=step.pk).update(outcome=NOT_SENT)
        return later(target, 60, last_error=f"held: {refusal}")
    mark_sending(step)
    try:
        with ctx.claims.renewing(target, enabled=item["method"] == UpdateMethod.MULTIPART_PUSH):
            accepted = client.update(image_uri=item["image"], targets=item["targets"], method=item["method"],
                                     stage=True, image=image)
    except BaseException as exc:  # a BMC error, or interrupted waiting for the answer (soft time limit, signal)
        mark_unanswered(step, exc)
        raise
    sent = {"bmc_task_uri": accepted.task_uri, "response_status": accepted.status, "outcome": "sent"}
    step.bmc_task_uri, step.response_status = accepted.task_uri, accepted.status
    if accepted.task is not None and accepted.task.done:
        return task_result(target, step, accepted.task, work, **sent)
    if not accepted.task_uri:
        return task_result(target, step, DoneTask(), work, **sent)  # 204 without a task: accepted and done
    TargetStep.objects.filter(pk=step.pk).update(**sent)
    retry = accepted.task.retry_after if accepted.task and accepted.task.retry_after else 1
    return later(target, retry, bmc_task_uri=accepted.task_uri, last_error="",
                 deadline_at=clock.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS))


NOT_SENT = "not_sent"
SENDING = "sending"
FOUND = "found"  # reconciled as landed (by the BMC's evidence, or by a person who checked it)
AMBIGUOUS = "ambiguous"
NEVER_LEFT = ("", NOT_SENT)  # recorded but never marked as leaving, or refused before the BMC processed it
RESENT = "resent: the BMC showed no trace after the settle period"
UNKNOWN_NOTE = "unknown: "


def settle_step(target: RolloutTarget, step: TargetStep, trace: Any) -> Outcome | reconcile.Found:
    """A request marked as leaving without an answer: WAIT (an Outcome) until the settle period has passed on the
    database's clock, then what the BMC shows (``trace()``: a ``reconcile.Found``). UNKNOWN once: wait a longer
    settle and ask again; UNKNOWN twice: the target is held for a person (failed, inconclusive, the rollout paused)
    with the evidence. Returns FOUND or ABSENT findings to the caller."""
    seconds = reconcile.settle_seconds(target.bmc_class)
    unknowns = sum(isinstance(m, str) and m.startswith(UNKNOWN_NOTE) for m in step.messages)
    due = seconds + unknowns * reconcile.unknown_settle_seconds(target.bmc_class)
    if step.outcome == SENDING:  # its sender may still be waiting for the answer (up to the client's timeout,
        due += float(settings.FLEET_BMC_TIMEOUT)  # then it stamps ``ambiguous`` afresh): settle after that
    elapsed = clock.since(step.requested_at)
    if elapsed < due:
        why = "unanswered" if not unknowns else "unanswered, and the BMC could not show whether it landed"
        return later(target, due - elapsed, last_error=f"{step.kind} {why}: waiting for the BMC to settle before "
                                                       f"asking it what it did")
    found = trace()
    if found.trace == Trace.UNKNOWN:
        note(step, UNKNOWN_NOTE + found.evidence)
        if unknowns == 0:
            wait = reconcile.unknown_settle_seconds(target.bmc_class)
            return later(target, wait, last_error=f"{step.kind}: the BMC cannot show yet whether the unanswered "
                                                  f"request landed ({found.evidence}); asking again in {wait:.0f}s")
        return fail(target, ErrorClass.INCONCLUSIVE, f"held for a person: {step.kind} {step.idem_key} went "
                    f"unanswered and the BMC shows no proof either way after two settle periods: "
                    f"{found.evidence}. Not sent again: check the BMC, record what you found on the rollout page "
                    f"(it landed / it did not land), then retry the exceptions.", [])
    note(step, f"settled: {found.trace} ({found.evidence})")
    return found


def resends_exhausted(step: TargetStep) -> bool:
    """Each resend needs the BMC's proof that the last request did not land; a BMC that keeps dropping requests
    stops after ``FLEET_BMC_MAX_RESENDS`` of them and the target is inconclusive."""
    return sum(m == RESENT for m in step.messages) >= settings.FLEET_BMC_MAX_RESENDS


def notes(step: TargetStep) -> list[str]:
    """The engine's own lines in a step's messages (kept when the BMC's task messages are stored)."""
    return [m for m in step.messages if isinstance(m, str)][-10:]


def note(step: TargetStep, message: str) -> None:
    """Add a line to the step's messages (RESENT, UNKNOWN and evidence lines verbatim: they are looked for)."""
    verbatim = message == RESENT or message.startswith((reconcile.EVIDENCE, UNKNOWN_NOTE))
    line = message[:300] if verbatim else f"{clock.now():%H:%M:%S} {message}"[:300]
    step.messages = [*step.messages, line][-20:]
    TargetStep.objects.filter(pk=step.pk).update(messages=step.messages)


def mark_sending(step: TargetStep, evidence: str = "") -> None:
    """Just before the request leaves: ``sending``, stamped on the database's clock (the settle period counts from
    here, not from when the chunk recorded it), with the reset evidence read just before, in one transaction
    flushed to disk (``synchronous_commit`` on). A step without this mark never left: it is sent without asking
    the BMC. A worker killed after it (while sending or waiting) leaves the mark: settle, then reconcile."""
    if evidence:
        step.messages = [*step.messages, evidence[:300]][-20:]
    with transaction.atomic():
        if is_postgres():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO on")
        TargetStep.objects.filter(pk=step.pk).update(requested_at=Now(), outcome=SENDING, messages=step.messages)
    step.outcome, step.requested_at = SENDING, clock.now()


def mark_unanswered(step: TargetStep, exc: BaseException) -> None:
    """A request that failed: NOT_SENT when the BMC did not process it (refused, 503), AMBIGUOUS when it may have
    (the answer was lost, or the wait for it was interrupted by the soft time limit: settle, then reconcile).
    The settle period counts from now (the database's clock): a BMC may still be working on a request its client
    gave up on."""
    if isinstance(exc, LostLease):
        outcome = NOT_SENT  # fenced before the send (the renewal during an upload failed before it started)
    else:
        outcome = AMBIGUOUS if getattr(exc, "ambiguous", True) else NOT_SENT
    why = exc if isinstance(exc, BmcError) else f"interrupted waiting for the answer ({type(exc).__name__})"
    step.outcome = outcome
    step.messages = [*step.messages, f"{clock.now():%H:%M:%S} {outcome}: {why}"[:300]][-20:]
    TargetStep.objects.filter(pk=step.pk).update(outcome=outcome, requested_at=Now(), messages=step.messages)
    step.requested_at = clock.now()


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
    """One side effect per step: Activate the staged images, then each reset their activation needs (a BMC reset:
    one per manager). Each is recorded before it is sent and marked (flushed) just before it leaves; a reset's
    evidence (its resource's LastResetTime and the BMC's DateTime) is read and flushed with that mark. A marked
    action without an answer is settled and reconciled like an update."""
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
        if not to_send and step.outcome not in NEVER_LEFT:
            outcome = settle_action(target, client, step, action, work)
            if outcome is not None:
                return outcome
            if step.response_status is not None:
                continue  # found: it happened
        kind, path = reset_target(client, action, work)
        ctx.claims.check(target)
        try:
            evidence = reconcile.reading(client, evidence_path(client, kind, path)) if kind else ""
            ctx.claims.check(target)
            mark_sending(step, evidence)
            status = client.reset_one(kind, path) if kind else send_action(client, action, work)
        except LostLease:
            raise  # fenced before the send: nothing sent, the step is another worker's now
        except BaseException as exc:  # a BMC error, or interrupted (the soft time limit, a signal)
            if step.outcome == SENDING:
                mark_unanswered(step, exc)
            raise
        TargetStep.objects.filter(pk=step.pk).update(response_status=status, outcome="sent", finished_at=Now())
        step.response_status = status
        if kind:
            client.session.expect_reboot()  # its 404s and refusals are the reboot, not the firmware
        wait = 2 if kind in ("bmc_reset", "ac_power_cycle") else 0
        if wait:
            return later(target, wait)
        return Outcome(TargetState.ACTIVATING, {}, again_now=True)
    deadline = clock.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_VERIFY_SECONDS)
    return Outcome(TargetState.VERIFYING, {"deadline_at": deadline}, again_now=True)


def reset_target(client: Any, action: str, work: list[dict[str, Any]]) -> tuple[str, str]:
    """(reset kind, the one resource path it goes to) of an activation action; ("", "") for Activate."""
    if not action.startswith("reset:"):
        return "", ""
    _, kind, *manager = action.split(":", 2)
    related = sorted({r for w in work if w["activation"] == kind for r in w.get("related", [])})
    if manager:
        related = [r for r in related if r.rstrip("/").rsplit("/", 1)[-1] == manager[0]] or related
    return kind, client.reset_paths(kind, related)[0]


def evidence_path(client: Any, kind: str, path: str) -> str:
    """Where a reset shows: the manager itself for a BMC reset, else the (first) system's LastResetTime."""
    if kind == "bmc_reset":
        return path
    systems = client.collection("Systems")
    return strip_prefix(client.url, systems[0]) if systems else path


def settle_action(target: RolloutTarget, client: Any, step: TargetStep, action: str,
                  work: list[dict[str, Any]]) -> Outcome | None:
    """An activation action marked as leaving without an answer: wait (an Outcome), found (confirmed: None),
    absent (send again: None, only on a reset's proof), or held for a person (an Outcome). Activate/StartUpdate
    is never proven absent by standard evidence: found when the inventory shows the new versions, else UNKNOWN
    (held after two settle periods), never sent again on the absence of evidence."""
    kind, path = reset_target(client, action, work)
    if not kind:
        verdict = settle_step(target, step, lambda: reconcile.activate_trace(client, work))
    else:
        verdict = settle_step(target, step, lambda: reconcile.reset_trace(client, step, evidence_path(
            client, kind, path)))
    if isinstance(verdict, Outcome):
        return verdict
    if verdict.trace == Trace.FOUND:
        step.response_status = 0
        TargetStep.objects.filter(pk=step.pk).update(response_status=0, outcome=FOUND, finished_at=Now())
        return None
    if not kind:  # activate_trace answers FOUND or UNKNOWN only: an Activate is never sent again on absence
        raise AssertionError(f"Activate settled {verdict.trace}")
    if resends_exhausted(step):
        return fail(target, ErrorClass.INCONCLUSIVE, f"{action}: {settings.FLEET_BMC_MAX_RESENDS} requests went "
                    f"unanswered and did not happen ({verdict.evidence})", [])
    note(step, RESENT)
    return None


def send_action(client: Any, action: str, work: list[dict[str, Any]]) -> int:
    if action == "activate":
        return client.activate(sorted({t for w in work for t in w["targets"]}))
    kind = action.split(":", 1)[1]
    related = sorted({r for w in work if w["activation"] == kind for r in w.get("related", [])})
    return client.reset(kind, related=related)
