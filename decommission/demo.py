"""Demo data for ``make run``: one closed request (sanitized, validated, certified, shipped, received) to look
at, and one in progress on the Procfile's BMC simulator (drained, inventory asked of the workers). Demo only: no
service imports this module."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from decommission import services
from decommission.models import DecommissionRequest, MediaState, MediaType, Medium
from decommission.services.steps import media_finish_many
from fleet.audit import Actor
from inventory.models import Server
from inventory.services import record_update


def _users() -> tuple[Actor, Actor]:
    User = get_user_model()
    return User.objects.get(username="operator"), User.objects.get(username="approver")


def _bmc_media(server: Server) -> list[dict]:
    name = server.hostname
    return [{"media_type": t, "serial": s, "manufacturer": mk, "model": md, "source": "redfish"} for t, s, mk, md in (
        (MediaType.NVME, f"S6CKNA0T{server.pk:06d}0", "Samsung", "MZWLO3T8HCLS-00A07"),
        (MediaType.NVME, f"S6CKNA0T{server.pk:06d}1", "Samsung", "MZWLO3T8HCLS-00A07"),
        (MediaType.BMC_FLASH, f"{name}/1", "BMC", "Manager flash"),
        (MediaType.HMC_FLASH, f"{name}/HGX_BMC_0", "BMC", "HGX HMC flash"),
        (MediaType.UEFI_NVRAM, f"{name}/UEFI", "UEFI", "UEFI NVRAM"),
        (MediaType.TPM, f"{name}-TPM0", "Infineon", "SLB9672"),
        (MediaType.DPU, f"{name}-DPU0", "NVIDIA", "BlueField-3 B3220"))]


@transaction.atomic
def decommission_demo_seed(*, simulator_url: str, actor: Actor | None = None) -> dict[str, int]:
    """Two demo requests on the last servers of the demo fleet (not the rollout's). Idempotent."""
    if DecommissionRequest.objects.exists():
        return {}
    operator, approver = _users()
    servers = list(Server.objects.filter(gpus__isnull=False).distinct().order_by("-hostname")[:4])
    if len(servers) < 4:
        return {}
    done = services.request_create(servers=servers[:2], reason="H100 generation refresh: resale", category="moderate",
                                   destination="resale", location="Demo DC, cage 4", actor=operator)
    services.request_approve(request=done, actor=approver)
    services.request_drain(request=done, actor=operator)
    services.request_record_inventory(request=done, found={a.pk: _bmc_media(a.server) for a in done.assets.all()},
                                      actor=operator)
    services.request_start_sanitizing(request=done, actor=operator)
    for medium in Medium.objects.filter(request=done).order_by("id"):
        state = MediaState.RECORDED if medium.media_type == MediaType.GPU_INFOROM else MediaState.SANITIZED
        media_finish_many(media=[medium], state=state, actor=operator, tool="demo",
                          reason=f"demo: {medium.technique}")
    services.request_validate(request=done, actor=approver)
    services.request_certify(request=done, actor=operator)
    services.request_release(request=done, actor=approver)
    outbound = {"from_party": "Demo DC cage 4", "to_party": "Acme Logistics", "from_signed_by": "operator",
                "to_signed_by": "J. Driver", "seal_ids": ["SEAL-0001", "SEAL-0002"], "count": 2,
                "weight_kg": Decimal("260.00"), "carrier": "Acme Logistics", "reference": "BOL-2026-0001"}
    services.custody_record(request=done, actor=operator, **outbound)
    services.request_dispose(request=done, outcome="resold", actor=operator)
    processor = services.processor_create(name="GreenCycle ITAD", certification="R2v3", certificate_id="R2V3-4411",
                                          expires_on=timezone.localdate() + dt.timedelta(days=300), actor=actor)
    services.custody_record(request=done, actor=operator, kind="receipt", from_party="Acme Logistics",
                            to_party=processor.name, from_signed_by="J. Driver", to_signed_by="Receiving clerk",
                            seal_ids=["SEAL-0001", "SEAL-0002"], count=2, weight_kg=Decimal("259.40"),
                            reference="COD-2026-0042", processor=processor)
    services.request_close(request=done, actor=approver)
    live_servers = servers[2:]
    for n, server in enumerate(live_servers, start=1):  # point them at the simulator's demo BMCs
        record_update(obj=server, actor=actor, bmc_address=f"{simulator_url.rstrip('/')}/bmc/demo-{14 + n:04d}")
    live = services.request_create(servers=live_servers, reason="Failed boards: vendor return", category="high",
                                   destination="internal_reuse", location="Demo DC, cage 2", actor=operator)
    services.request_approve(request=live, actor=approver)
    services.request_drain(request=live, actor=operator)
    services.request_inventory_start(request=live, actor=operator)
    return {"closed": done.pk, "in_progress": live.pk}
