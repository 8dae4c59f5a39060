"""A person's decision on an asset the workers held (``decommission.executor``: the BMC's standard evidence
could not show whether an action landed, or an error class ran past its bound). The decision and its note are
recorded in the asset's evidence chain; the workers take the asset again at once.

- ``reconcile``: read the device again (the evidence may be there now); never sends on a guess.
- ``landed``: the person verified on the device that the recorded actions landed: they are adopted.
- ``not_landed``: the person verified they did not: they may be sent again (the send bound starts over)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.functions import Now

from decommission.models import Asset, MediaState, Medium
from decommission.services.evidence import event_append
from decommission.services.steps import Outcome, outcomes_write
from fleet.audit import Actor

DECISIONS = ("reconcile", "landed", "not_landed")


@transaction.atomic
def asset_resume(*, asset: Asset, decision: str, note: str, actor: Actor | None) -> Asset:
    """Release ``asset``'s hold with a person's ``decision`` (``DECISIONS``) and ``note`` (what they saw)."""
    errors = {}
    if decision not in DECISIONS:
        errors["decision"] = f"One of {', '.join(DECISIONS)}."
    if decision in ("landed", "not_landed") and not (note or "").strip():
        errors["note"] = "Say what you verified on the device."
    if errors:
        raise ValidationError(errors)
    asset = Asset.objects.select_for_update(no_key=True).select_related("request").get(pk=asset.pk)
    if not asset.hold_reason:
        raise ValidationError({"asset": f"{asset} is not held."})
    open_media = list(Medium.objects.filter(asset=asset, state__in=(MediaState.SENDING, MediaState.RUNNING)))
    if decision == "landed":
        outcomes_write([Outcome(medium=m, state=MediaState.SANITIZED, tool="person", reason=f"verified on the "
                                f"device by a person: {note}"[:300], detail={"hold": asset.hold_evidence})
                        for m in open_media], actor=actor, request=asset.request)
        if asset.power_off_sent_at is not None and asset.powered_off_at is None:
            Asset.objects.filter(pk=asset.pk).update(powered_off_at=Now())
    elif decision == "not_landed":
        Medium.objects.filter(pk__in=[m.pk for m in open_media]).update(
            state=MediaState.PENDING, sent_at=None, sends=0, unknown_checks=0, task_uri="")
        Asset.objects.filter(pk=asset.pk, powered_off_at__isnull=True).update(power_off_sent_at=None,
                                                                              power_off_sends=0)
    else:
        Medium.objects.filter(pk__in=[m.pk for m in open_media]).update(unknown_checks=0)
    event_append(request=asset.request, asset=asset, step="asset.resume", result=decision, actor=actor,
                 detail={"note": note, "hold_reason": asset.hold_reason, "hold_evidence": asset.hold_evidence})
    Asset.objects.filter(pk=asset.pk).update(hold_reason="", hold_evidence={}, held_at=None, errors=0,
                                             next_run_at=Now())
    asset.refresh_from_db()
    return asset
