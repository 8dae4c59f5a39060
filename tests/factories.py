"""Test data built through the real services (so invariants and audit hold)."""

from __future__ import annotations

import itertools

from fleet.audit import SYSTEM
from inventory import services
from inventory.models import Gpu, GpuModel, Hall, PowerFeed, Rack, Row, Server, ServerPlatform, Site

_seq = itertools.count(1)


def site(code: str | None = None) -> Site:
    n = next(_seq)
    return services.record_create(model_class=Site, actor=SYSTEM, code=code or f"s{n}", name=f"Site {n}",
                                  timezone="UTC", electricity_price_kwh="0.1000", pue="1.30")


def rack(site_obj: Site | None = None, name: str | None = None) -> Rack:
    n = next(_seq)
    site_obj = site_obj or site()
    hall = services.record_create(model_class=Hall, actor=SYSTEM, site=site_obj, name=f"H{n}")
    row = services.record_create(model_class=Row, actor=SYSTEM, hall=hall, name=f"R{n}")
    feed = services.record_create(model_class=PowerFeed, actor=SYSTEM, site=site_obj, name=f"PDU-{n}")
    return services.record_create(model_class=Rack, actor=SYSTEM, row=row, name=name or f"rack-{n}", position=1,
                                  power_budget_kw="40.00", power_feeds=[feed])


def gpu_model(name: str = "NVIDIA H100 80GB HBM3", sku: str = "H100-SXM5-80GB") -> GpuModel:
    return GpuModel.objects.get_or_create(name=name, defaults={"sku": sku, "architecture": "Hopper",
                                                               "memory_gib": 80, "tdp_w": 700})[0]


def server(rack_obj: Rack | None = None, hostname: str | None = None, rack_unit: int | None = None) -> Server:
    n = next(_seq)
    platform = ServerPlatform.objects.get_or_create(name="HGX H100 8-GPU", defaults={"gpu_model": gpu_model()})[0]
    rack_obj = rack_obj if rack_obj is not None else rack()
    return services.record_create(model_class=Server, actor=SYSTEM, hostname=hostname or f"node{n:05d}",
                                  serial=f"SRV{n:06d}", platform=platform, rack=rack_obj,
                                  rack_unit=rack_unit if rack_unit is not None else 2 + (n % 5) * 8)


def gpu(server_obj: Server | None = None, slot: int | None = None, state: str = "in_service", **fields) -> Gpu:
    n = next(_seq)
    if server_obj is not None and slot is None:
        slot = server_obj.gpus.count() + 1
    fields.setdefault("serial", f"16501240{n:05d}")
    fields.setdefault("uuid", f"GPU-{n:08x}-1111-2222-3333-444455556666")
    fields.setdefault("pci_bus_id", f"00000000:{0x10 + (slot or 0):02X}:00.0" if server_obj else "")
    return services.gpu_create(actor=SYSTEM, server=server_obj, module_id=slot if server_obj else None,
                               model=gpu_model(), state=state, **fields)
