"""Inventoried: every data-bearing medium recorded by serial before any wipe. Redfish (through the BMC) reports
drives, BMC/HMC, UEFI, TPM and DPUs; inventory's own records give each GPU's HBM and InfoROM. A medium seen later
that was not recorded here is refused (it needs a new request), never silently added."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from decommission.models import Asset, AssetState, DecommissionRequest, MediaState, MediaType, Medium
from decommission.policy import METHODS, required_level
from decommission.services.evidence import events_append_many
from decommission.services.workflow import locked, request_move
from fleet.audit import Actor
from inventory.models import Gpu

REQUIRED_FIELDS = ("media_type", "serial")


def gpu_media(gpu: Gpu) -> list[dict[str, Any]]:
    """A GPU's two media: HBM (volatile) and InfoROM/VBIOS (record only), identified by the board's identity."""
    ident = gpu.serial or gpu.uuid or f"gpu-{gpu.pk}"
    model = str(gpu.model) if gpu.model_id else ""
    return [
        {"media_type": MediaType.GPU_HBM, "serial": f"{ident}/HBM", "manufacturer": "NVIDIA", "model": model,
         "gpu": gpu, "source": "inventory"},
        {"media_type": MediaType.GPU_INFOROM, "serial": f"{ident}/InfoROM", "manufacturer": "NVIDIA",
         "model": f"{model} VBIOS {gpu.vbios_version or 'unknown'} InfoROM {gpu.inforom_image or 'unknown'}",
         "gpu": gpu, "source": "inventory"},
    ]


def _clean(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    missing = [f for f in REQUIRED_FIELDS if not str(item.get(f) or "").strip()]
    if missing:
        raise ValidationError({"media": f"{where}: missing {', '.join(missing)}."})
    if item["media_type"] not in MediaType.values:
        raise ValidationError({"media": f"{where}: '{item['media_type']}' is not a media type."})
    return dict(item)


@transaction.atomic
def request_record_inventory(*, request: DecommissionRequest, found: Mapping[int, Sequence[Mapping[str, Any]]],
                             actor: Actor | None) -> DecommissionRequest:
    """Record every asset's media (``found``: asset id -> media from Redfish) and the GPUs' own; all or nothing.
    Recorded once: a second inventory of the same request (the tick sends the message again while the first is
    still reading the BMCs) finds it done under the request's lock and writes nothing."""
    request = locked(request)
    if Medium.objects.filter(request=request).exists():
        return request
    assets = {a.pk: a for a in Asset.objects.filter(request=request).select_related("server", "gpu")}
    unknown = set(found) - set(assets)
    if unknown:
        raise ValidationError({"media": f"Assets {sorted(unknown)} are not in {request}."})
    rows: list[Medium] = []
    seen: set[tuple[str, str]] = set()
    by_server: dict[int, list[Gpu]] = {}
    for gpu in Gpu.objects.filter(server__in=[a.server_id for a in assets.values() if a.server_id]).select_related(
            "model").order_by("id"):  # one query for every server's GPUs
        by_server.setdefault(gpu.server_id, []).append(gpu)
    for asset in assets.values():
        items = [_clean(i, f"{asset} medium {n + 1}") for n, i in enumerate(found.get(asset.pk, ()))]
        gpus = by_server.get(asset.server_id, []) if asset.server_id else [asset.gpu]
        if asset.server_id and asset.pk not in found:
            raise ValidationError({"media": f"{asset}: no media were reported by its BMC."})
        for gpu in gpus:
            items += gpu_media(gpu)
        for item in items:
            key = (item["media_type"], item["serial"])
            if key in seen:
                raise ValidationError({"media": f"{asset}: {key[0]} {key[1]} is reported twice."})
            seen.add(key)
            rows.append(Medium(
                request=request, asset=asset, gpu=item.get("gpu"), media_type=item["media_type"],
                serial=item["serial"], manufacturer=item.get("manufacturer", ""), model=item.get("model", ""),
                source=item.get("source", "redfish"), target_uri=item.get("target_uri", ""),
                level=required_level(item["media_type"], request.level),
                technique=METHODS[item["media_type"]][1], state=MediaState.PENDING))
    Medium.objects.bulk_create(rows)
    Asset.objects.filter(request=request).update(state=AssetState.INVENTORIED)
    events_append_many(request=request, actor=actor, items=[
        {"asset": asset, "step": "inventory", "result": "recorded",
         "detail": {"media": sorted(f"{m.media_type}:{m.serial}" for m in rows if m.asset_id == asset.pk)}}
        for asset in assets.values()])
    return request_move(request=request, action_name="inventory", actor=actor, detail={"media": len(rows)})


def medium_unexpected(*, asset: Asset, media_type: str, serial: str) -> str:
    """An error message when a medium seen now was not inventoried; empty when it was."""
    if Medium.objects.filter(asset=asset, media_type=media_type, serial=serial).exists():
        return ""
    return (f"{asset}: {media_type} {serial} was not recorded at inventory; it appeared afterwards and is "
            "refused (record it in a new request).")
