"""Decommission test data through the real services: servers with GPUs, a request walked to any state."""

from __future__ import annotations

from decimal import Decimal

from decommission import services
from decommission.models import DecommissionRequest, MediaState, MediaType, Medium
from decommission.services.steps import medium_finish
from tests import factories

BMC_MEDIA = [("bmc_flash", "BMC-{n}"), ("hmc_flash", "HMC-{n}"), ("uefi_nvram", "NVRAM-{n}"), ("tpm", "TPM-{n}"),
             ("dpu", "DPU-{n}"), ("nvme", "NVME-{n}-0"), ("nvme", "NVME-{n}-1")]


def server_with_gpus(gpus: int = 2, hostname: str | None = None):
    server = factories.server(hostname=hostname)
    for slot in range(gpus):
        factories.gpu(server, slot=slot)
    return server


def found_for(request: DecommissionRequest) -> dict[int, list[dict]]:
    """What a BMC would report for each server asset of ``request``."""
    return {a.pk: [{"media_type": t, "serial": s.format(n=a.pk), "manufacturer": "Sim", "model": "Sim " + t,
                    "source": "redfish"} for t, s in BMC_MEDIA]
            for a in request.assets.filter(server__isnull=False)}


def finish_all(request: DecommissionRequest, actor) -> None:
    """Every medium done as a worker would record it (tool outputs are tested in test_steps/test_agent)."""
    for medium in Medium.objects.filter(request=request, state=MediaState.PENDING).order_by("id"):
        done = MediaState.RECORDED if medium.media_type == MediaType.GPU_INFOROM else MediaState.SANITIZED
        medium_finish(medium=medium, state=done, tool="test", tool_version="1", command="step",
                      output='{"ok": true}', actor=actor)


def walk(to: str, *, users, servers=None, category="moderate", destination="resale", level=""):
    """A request walked to state ``to`` by the right people (requester operator, approver, validator admin)."""
    servers = servers or [server_with_gpus()]
    op, ap = users["operator"], users["approver"]
    r = services.request_create(servers=servers, reason="end of life", category=category, destination=destination,
                                level=level, actor=op)
    order = ["approved", "drained", "inventoried", "sanitizing", "verifying", "validated", "certified", "released",
             "in_transit", "disposed", "closed"]
    steps = {
        "approved": lambda: services.request_approve(request=r, actor=ap),
        "drained": lambda: services.request_drain(request=r, actor=op),
        "inventoried": lambda: services.request_record_inventory(request=r, found=found_for(r), actor=op),
        "sanitizing": lambda: services.request_start_sanitizing(request=r, actor=op),
        "verifying": lambda: finish_all(r, op),
        "validated": lambda: services.request_validate(request=r, actor=ap),
        "certified": lambda: services.request_certify(request=r, actor=op),
        "released": lambda: services.request_release(request=r, actor=ap),
        "in_transit": lambda: services.custody_record(request=r, **handoff(r), actor=op),
        "disposed": lambda: services.request_dispose(request=r, outcome="resold", actor=op),
        "closed": lambda: (services.custody_record(request=r, **receipt(r), actor=op),
                           services.request_close(request=r, actor=ap)),
    }
    if to != "requested":
        for state in order[:order.index(to) + 1]:
            steps[state]()
    r.refresh_from_db()
    return r


def handoff(r: DecommissionRequest) -> dict:
    return {"from_party": "DC1 cage", "to_party": "Acme Logistics", "from_signed_by": "Ops Lead",
            "to_signed_by": "Driver J. Doe", "seal_ids": ["S-1001"], "count": r.assets.count(),
            "weight_kg": Decimal("65.00"), "carrier": "Acme Logistics", "reference": "BOL-1"}


def receipt(r: DecommissionRequest) -> dict:
    import datetime as dt

    proc = services.processor_create(name=f"GreenCycle {r.pk}", certification="R2v3", certificate_id="R2-123",
                                     expires_on=dt.date(2099, 1, 1), actor=None)
    return {"kind": "receipt", "from_party": "Acme Logistics", "to_party": proc.name, "from_signed_by": "Driver",
            "to_signed_by": "Receiving clerk", "seal_ids": ["S-1001"], "count": r.assets.count(),
            "weight_kg": Decimal("65.10"), "reference": "COD-77", "processor": proc}
