"""The host agent: a one-time token bound to one asset (server) of a request, expiring, used once; the script
Fleet serves for it; and the upload of the commands' raw outputs, which Fleet parses and decides on.

Token misuse is refused: another server's name, a second fetch or upload, an expired token. An upload that names
a medium not recorded at inventory is refused whole (nothing is written)."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from decommission.models import (
    AgentToken,
    Asset,
    AssetState,
    DecommissionRequest,
    MediaState,
    MediaType,
    Medium,
    RequestState,
)
from decommission.parsers import (
    ParseError,
    SanitizeStatus,
    nvme_verdict,
    parse_id_ctrl,
    parse_sanitize_log,
    this_run,
)
from decommission.policy import USER_DATA
from decommission.services.evidence import event_append, events_append_many
from decommission.services.steps import Outcome, outcomes_write
from fleet.audit import Actor, audit_write
from fleet.models import AuditAction

AGENT_MEDIA = (MediaType.TPM, MediaType.GPU_HBM)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@transaction.atomic
def agent_token_issue(*, asset: Asset, actor: Actor | None) -> tuple[AgentToken, str]:
    """A fresh one-time token for ``asset``'s host agent; returns (row, raw token). The raw token is not stored."""
    if asset.server_id is None:
        raise ValidationError({"asset": "Only a server runs the host agent."})
    state = DecommissionRequest.objects.filter(pk=asset.request_id).values_list("state", flat=True).get()
    if state != RequestState.SANITIZING:
        raise ValidationError({"asset": f"DR-{asset.request_id} is '{state}', not sanitizing."})
    # Lock order: the asset, then the request (as the workers' fenced records do), or the deferred foreign-key
    # check of the new rows would take the asset after the request lock: a deadlock with a running worker.
    Asset.objects.select_for_update(no_key=True).filter(pk=asset.pk).values_list("pk").get()
    raw = secrets.token_urlsafe(32)
    token = AgentToken.objects.create(
        asset=asset, token_sha256=_digest(raw),
        expires_at=timezone.now() + dt.timedelta(seconds=settings.DECOMMISSION_AGENT_TOKEN_SECONDS))
    audit_write(actor=actor, action=AuditAction.CREATE, obj=token, message=f"host agent token for {asset}")
    event_append(request=asset.request, asset=asset, step="agent.token", result="issued", actor=actor,
                 detail={"token": token.pk, "expires_at": token.expires_at.isoformat()})
    return token, raw


def _refusal(token: AgentToken | None, server: str, stage: str) -> str:
    if token is None:
        return "Unknown agent token."
    if token.expires_at <= timezone.now():
        return "This agent token has expired; ask for a new one."
    if (server or "").strip().lower() != token.asset.server.hostname:
        return f"This agent token is bound to another server than '{server}'."
    if token.used_at is not None or (stage == "fetch" and token.fetched_at is not None):
        return "This agent token was already used."
    if stage == "upload" and token.fetched_at is None:
        return "Fetch the agent script with this token first."
    return ""


def _claim(raw: str, server: str, *, stage: str) -> AgentToken:
    """The token, if ``server`` may use it now for ``stage`` ('fetch' marks it fetched). A token presented by
    another server is burnt; that write commits before the refusal is raised."""
    with transaction.atomic():
        token = AgentToken.objects.select_for_update(of=("self",)).select_related(
            "asset__server", "asset__request").filter(token_sha256=_digest(raw or "")).first()
        refusal = _refusal(token, server, stage)
        if token is not None and refusal and "another server" in refusal:
            token.used_at = token.used_at or timezone.now()
            token.save(update_fields=["used_at"])
        elif token is not None and not refusal and stage == "fetch":
            token.fetched_at = timezone.now()
            token.save(update_fields=["fetched_at"])
    if refusal:
        raise PermissionDenied(refusal)
    assert token is not None
    return token


def agent_media(asset: Asset, media: list[Medium] | None = None) -> list[Medium]:
    """What the agent works on: TPM, GPU HBM, and NVMe drives the BMC cannot erase (no Redfish resource);
    ``media``: the asset's media already loaded (else they are read)."""
    if media is None:
        media = list(Medium.objects.filter(asset=asset))
    return sorted((m for m in media if m.media_type in AGENT_MEDIA or (m.media_type == MediaType.NVME
                                                                        and not m.target_uri)),
                  key=lambda m: (m.media_type, m.serial, m.pk))


def agent_script(*, raw_token: str, server: str, upload_url: str) -> str:
    """The shell script for this host (the fetch uses the token's first life; the upload its second)."""
    token = _claim(raw_token, server, stage="fetch")
    media = agent_media(token.asset)
    with transaction.atomic():
        # the asset, then the request
        Asset.objects.select_for_update(no_key=True).filter(pk=token.asset_id).values_list("pk").get()
        event_append(request=token.asset.request, asset=token.asset, step="agent.script", result="fetched",
                     actor=None, detail={"server": server, "media": [m.serial for m in media]})
    return render_to_string("decommission/agent.sh", {
        "server": token.asset.server.hostname, "upload_url": upload_url, "token": raw_token,
        "nvme_serials": [m.serial for m in media if m.media_type == MediaType.NVME],
        "purge": token.asset.request.level != "clear", "has_tpm": any(m.media_type == MediaType.TPM for m in media),
    })


@dataclass
class Decision:
    medium: Medium
    state: str
    reason: str
    result: dict[str, Any]
    device_failure: bool = False


def _reading(item: dict[str, Any] | None) -> SanitizeStatus | None:
    return parse_sanitize_log(item["output"]) if item is not None else None


def _decide_nvme(medium: Medium, by_step: dict[str, dict[str, Any]], purge: bool) -> Decision:
    log = by_step.get("nvme.sanitize-log")
    fmt = by_step.get("nvme.format")
    command = by_step.get("nvme.sanitize")
    if log is not None:
        try:
            after = parse_sanitize_log(log["output"])
            before = _reading(by_step.get("nvme.sanitize-log.before"))
            progress = _reading(by_step.get("nvme.sanitize-log.progress"))
            verdict, reason = nvme_verdict(after, purge_required=purge)
        except ParseError as exc:
            return Decision(medium, MediaState.FAILED, f"sanitize-log could not be read: {exc}", log)
        if verdict == "done":
            if command is not None and int(command.get("exit_code", 1)) != 0:
                return Decision(medium, MediaState.FAILED, f"nvme sanitize exit {command.get('exit_code')}: the "
                                "log's completion is not this run's", command, device_failure=True)
            proven, why = this_run(before, progress, after)
            if not proven:  # not the device's failure: the agent runs again with a new token
                return Decision(medium, MediaState.FAILED, why, log)
            return Decision(medium, MediaState.SANITIZED, f"{reason}; {why}", log)
        if verdict == "failed" and fmt is None:
            return Decision(medium, MediaState.FAILED, reason, log, device_failure=True)
    if fmt is not None:  # the recorded fallback: nvme format --ses=2 (crypto) or --ses=1 (user data erase)
        if int(fmt.get("exit_code", 1)) == 0:
            return Decision(medium, MediaState.SANITIZED, "nvme format completed (recorded fallback)", fmt)
        return Decision(medium, MediaState.FAILED, f"nvme format exit {fmt.get('exit_code')}", fmt,
                        device_failure=True)
    return Decision(medium, MediaState.FAILED, "no sanitize-log or format result for this drive", {})


def agent_results_submit(*, raw_token: str, server: str, results: list[dict[str, Any]],
                         actor: Actor | None = None) -> list[Decision]:
    """Parse the agent's raw outputs and decide per medium; all checks first, so a refused upload writes nothing
    (except the burnt token on misuse)."""
    _claim(raw_token, server, stage="upload")
    with transaction.atomic():
        asset_id = AgentToken.objects.filter(token_sha256=_digest(raw_token)).values_list("asset_id", flat=True).get()
        # the asset, then the request
        Asset.objects.select_for_update(no_key=True).filter(pk=asset_id).values_list("pk").get()
        token = AgentToken.objects.select_for_update(of=("self",)).select_related(
            "asset__server", "asset__request").get(token_sha256=_digest(raw_token))
        if token.used_at is not None:  # another upload won the race
            raise PermissionDenied("This agent token was already used.")
        return _submit(token, results, actor)


def _submit(token: AgentToken, results: list[dict[str, Any]], actor: Actor | None) -> list[Decision]:
    asset = token.asset
    media = agent_media(asset)
    by_serial: dict[str, dict[str, dict[str, Any]]] = {}
    errors = []
    for n, item in enumerate(results):
        if not isinstance(item, dict) or not item.get("step") or "output" not in item:
            errors.append(f"result {n + 1}: needs 'step' and 'output'")
            continue
        serial = str(item.get("serial") or "")
        if item["step"] == "nvme.id-ctrl":
            try:
                serial = parse_id_ctrl(item["output"])["serial"]
            except (ParseError, ValueError) as exc:
                errors.append(f"result {n + 1}: {exc}")
                continue
            item["serial"] = serial
            if not Medium.objects.filter(asset=asset, media_type=MediaType.NVME, serial=serial).exists():
                errors.append(f"{asset}: NVMe {serial} was not recorded at inventory; it appeared afterwards and is "
                              "refused (record it in a new request).")
        by_serial.setdefault(serial, {})[item["step"]] = item
    if errors:
        raise ValidationError({"results": errors})
    decisions = []
    purge = asset.request.level != "clear"
    for medium in media:
        if medium.state != MediaState.PENDING:
            continue
        if medium.media_type == MediaType.NVME:
            decisions.append(_decide_nvme(medium, by_serial.get(medium.serial, {}), purge))
        elif medium.media_type == MediaType.TPM:
            out = by_serial.get("", {}).get("tpm2_clear")
            ok = out is not None and int(out.get("exit_code", 1)) == 0
            decisions.append(Decision(medium, MediaState.SANITIZED if ok else MediaState.FAILED,
                                      "tpm2_clear exit 0" if ok else "tpm2_clear failed or missing", out or {},
                                      device_failure=out is not None and not ok))
    gpu_apps = by_serial.get("", {}).get("nvidia-smi.compute-apps")
    gpu_reset = by_serial.get("", {}).get("nvidia-smi.reset")
    gpus_ok = bool(gpu_apps and not gpu_apps["output"].strip() and gpu_reset and int(gpu_reset["exit_code"]) == 0)
    token.used_at = timezone.now()
    token.save(update_fields=["used_at"])
    # The GPU reset first, then every medium's outcome: one chain lock and one insert each (the asset's chain).
    events_append_many(request=asset.request, actor=actor, items=[
        {"asset": asset, "step": f"gpu.{step.split('.')[1]}", "tool": "nvidia-smi",
         "tool_version": item.get("tool_version", ""), "command": item.get("command", ""), "output": item["output"],
         "result": "ok" if gpus_ok else "failed", "detail": {"exit_code": item.get("exit_code")}}
        for step in ("nvidia-smi.compute-apps", "nvidia-smi.reset")
        if (item := by_serial.get("", {}).get(step)) is not None])
    outcomes_write([Outcome(medium=d.medium, state=d.state, tool=d.result.get("tool", ""),
                            tool_version=d.result.get("tool_version", ""), command=d.result.get("command", ""),
                            output=d.result.get("output", ""), reason=d.reason, device_failure=d.device_failure,
                            detail={"exit_code": d.result.get("exit_code")}) for d in decisions], actor=actor)
    Asset.objects.filter(pk=asset.pk, state=AssetState.SANITIZING).update(next_run_at=timezone.now())
    return decisions


def agent_media_done(asset: Asset, media: list[Medium] | None = None) -> bool:
    """The agent's part is done: its NVMe and TPM media are finished and the GPU reset was reported
    (``media``: the asset's media already loaded, else they are read)."""
    if media is None:
        media = list(Medium.objects.filter(asset=asset))
    pending = [m for m in agent_media(asset, media) if m.media_type in USER_DATA and m.state == MediaState.PENDING]
    return not pending and (not any(m.media_type == MediaType.GPU_HBM for m in media)
                            or asset.events.filter(step="gpu.reset", result="ok").exists())
