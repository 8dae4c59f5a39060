"""BMC side effects: staging updates and activation actions, recorded before they are sent, reconciled after."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from firmware.models import ErrorClass, RolloutTarget, TargetState, TargetStep, UpdateMethod, version_key
from firmware.redfish import BmcError, bmc_client
from firmware.services.engine.context import _activation_actions, _Context
from firmware.services.engine.locks import _pg
from firmware.services.engine.outcomes import Outcome, _fail, _later


def _client(target: RolloutTarget) -> Any:
    return bmc_client(target.server.bmc_address)


def _record(target: RolloutTarget, key: str, kind: str, release_id: int | None) -> tuple[TargetStep, bool]:
    """Record a side effect BEFORE sending it: committed, and flushed to disk (``synchronous_commit`` on for
    this transaction), so no crash of the worker or of PostgreSQL forgets a request the BMC may have received."""
    with transaction.atomic():
        if _pg():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO on")
        try:
            with transaction.atomic():
                return TargetStep.objects.create(idem_key=key, target=target, release_id=release_id, kind=kind,
                                                 requested_at=timezone.now()), True
        except IntegrityError:
            pass
    return TargetStep.objects.get(idem_key=key), False


def _task_result(target: RolloutTarget, step: TargetStep, task: Any, work: list[dict[str, Any]],
                 **step_fields: Any) -> Outcome:
    """A finished or running update task -> the target's next step (``step_fields``: more to write on the step)."""
    now = timezone.now()
    item = work[target.item_index]
    if not task.done:
        deadline = target.deadline_at or (now + dt.timedelta(seconds=settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS))
        if step_fields:
            TargetStep.objects.filter(pk=step.pk).update(**step_fields)
        if now >= deadline:
            TargetStep.objects.filter(pk=step.pk).update(outcome="timeout", messages=task.messages[-5:])
            return _fail(target, ErrorClass.INCONCLUSIVE,
                         f"update task {task.uri} still {task.state} at {task.percent}% after "
                         f"{settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS}s", [])
        return _later(target, task.retry_after or 1, deadline_at=deadline, bmc_task_uri=task.uri)
    TargetStep.objects.filter(pk=step.pk).update(outcome=task.state.lower(), finished_at=now,
                                                 messages=task.messages[-10:], **step_fields)
    if not task.ok:
        aborted = any("TaskAborted" in m for m in task.message_ids) and not any(
            "Failed" in m for m in task.message_ids)
        if aborted:  # the BMC rebooted under the task: not the image's fault; send it again
            TargetStep.objects.filter(pk=step.pk).update(idem_key=f"{step.idem_key}:aborted:{step.pk}")
            return _later(target, 2, last_error=task.failure(), bmc_task_uri="", deadline_at=None)
        return _fail(target, ErrorClass.FIRMWARE, f"{item['component']} {item['version']}: {task.failure()}",
                     [item["release"]])
    nxt = target.item_index + 1
    if nxt < len(work):
        return Outcome(TargetState.STAGING, {"item_index": nxt, "bmc_task_uri": "", "deadline_at": None,
                                             "attempts": 0}, again_now=True)
    return Outcome(TargetState.DRAINING, {"item_index": 0, "bmc_task_uri": "", "deadline_at": None,
                                          "attempts": 0, "last_error": ""}, again_now=True)


def _image_bytes(item: dict[str, Any]) -> bytes | None:
    """The uploaded image of a multipart push (a release with only a URL is pulled by the BMC instead)."""
    if item["method"] != UpdateMethod.MULTIPART_PUSH:
        return None
    from firmware.models import Release

    release = Release.objects.get(pk=item["release"])
    with release.image_file.open("rb") as handle:
        return handle.read()


def _staging(target: RolloutTarget, ctx: _Context) -> Outcome:
    """Stage the current bundle item: one update request per (target, release), ever. A recorded request is
    reconciled (its task, the BMC's task list, the inventory) rather than sent again."""
    work = target.work
    item = work[target.item_index]
    client = _client(target)
    key = f"{target.pk}:{item['release']}:update"
    step, to_send = ctx.step(target, key)
    if step is not None and not to_send:
        task_uri = step.bmc_task_uri or target.bmc_task_uri
        if task_uri:
            try:
                return _task_result(target, step, client.task(task_uri), work)
            except BmcError as exc:
                if exc.status != 404:
                    raise
        found = client.find_update_task(image_uri=item["image"], targets=item["targets"])
        if found is not None:  # the request reached the BMC; its answer was lost: adopt its task
            TargetStep.objects.filter(pk=step.pk).update(bmc_task_uri=found.uri, messages=["adopted after a lost reply"])
            step.bmc_task_uri = found.uri
            return _task_result(target, step, found, work)
        versions = client.versions(item["targets"])
        if all(version_key(v) == version_key(item["version"]) for v in versions.values()):
            return _task_result(target, step, _DoneTask(), work)
        # No trace on the BMC: the request never arrived (refused before processing, or the worker died before
        # sending). Sending it now is the first request the BMC sees.
        TargetStep.objects.filter(pk=step.pk).update(
            messages=[*step.messages, f"{timezone.now():%H:%M:%S} no trace on the BMC: sent again"][-20:])
    elif step is None:
        step, created = _record(target, key, "update", item["release"])
        if not created:
            return _later(target, 1)  # raced with another step; reconcile next time
    accepted = client.update(image_uri=item["image"], targets=item["targets"], method=item["method"], stage=True,
                             image=_image_bytes(item))
    sent = {"bmc_task_uri": accepted.task_uri, "response_status": accepted.status}
    step.bmc_task_uri = accepted.task_uri
    if accepted.task is not None and accepted.task.done:
        return _task_result(target, step, accepted.task, work, **sent)
    if not accepted.task_uri:
        return _task_result(target, step, _DoneTask(), work, **sent)  # 204 without a task: accepted and done
    TargetStep.objects.filter(pk=step.pk).update(**sent)
    retry = accepted.task.retry_after if accepted.task and accepted.task.retry_after else 1
    return _later(target, retry, bmc_task_uri=accepted.task_uri, last_error="",
                  deadline_at=timezone.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS))


class _DoneTask:
    uri = ""
    state = "Completed"
    status = "OK"
    done = True
    ok = True
    percent = 100
    retry_after = None
    messages: list[dict[str, Any]] = []
    message_ids: list[str] = []


def _activating(target: RolloutTarget, ctx: _Context) -> Outcome:
    """One side effect per step: Activate the staged images, then each reset their activation needs. Each is
    recorded before it is sent; a recorded one is not sent again (verifying re-sends a reset only when it was
    never confirmed and the versions show it did not happen)."""
    client = _client(target)
    work = target.work
    for action in _activation_actions(work):
        key = f"{target.pk}:{action}"
        step, to_send = ctx.step(target, key)
        if step is not None and step.response_status is not None:
            continue  # sent and confirmed
        if step is None:
            step, created = _record(target, key, "activate" if action == "activate" else "reset", None)
            if not created:
                return _later(target, 1)
        # else: recorded but never confirmed (an error, or the worker died around the request): send it again;
        # Activate is idempotent, a reset at worst happens twice (recorded in the step's messages)
        status = _send_action(client, action, work)
        TargetStep.objects.filter(pk=step.pk).update(response_status=status, outcome="sent",
                                                     finished_at=timezone.now())
        wait = 2 if action in ("reset:bmc_reset", "reset:ac_power_cycle") else 0
        if wait:
            return _later(target, wait)
        return Outcome(TargetState.ACTIVATING, {}, again_now=True)
    deadline = timezone.now() + dt.timedelta(seconds=settings.FLEET_ROLLOUT_VERIFY_SECONDS)
    return Outcome(TargetState.VERIFYING, {"deadline_at": deadline}, again_now=True)


def _send_action(client: Any, action: str, work: list[dict[str, Any]]) -> int:
    if action == "activate":
        return client.activate(sorted({t for w in work for t in w["targets"]}))
    kind = action.split(":", 1)[1]
    related = sorted({r for w in work if w["activation"] == kind for r in w.get("related", [])})
    return client.reset(kind, related=related)
