"""A small fleet for rollout tests, built through the inventory and catalog services: racks with power feeds,
servers (optionally grouped into NVLink domains) whose BMCs are virtual BMCs of the simulator, GPUs with a
VBIOS version, and a bundle that updates the VBIOS."""

from __future__ import annotations

from dataclasses import dataclass, field

from firmware.models import Bundle, ComponentSpec, Release, Rollout, UpdateMethod
from firmware.services import catalog
from firmware.services import rollout as svc
from fleet.audit import SYSTEM
from inventory import services
from inventory.models import NvlinkDomain, Server, Site
from tests import factories
from tests.firmware import fw_factories

OLD_VBIOS = "96.00.89.00.01"  # the simulator's hgx-h100 profile ships this
NEW_VBIOS = "96.00.9F.00.01"


@dataclass
class Fleet:
    servers: list[Server] = field(default_factory=list)
    bundle: Bundle | None = None
    sites: list[Site] = field(default_factory=list)


def use_simple_update() -> None:
    """The VBIOS spec says multipart push (the image bytes); the tests' images are URLs the simulator reads."""
    catalog.component_specs_ensure(actor=SYSTEM)
    ComponentSpec.objects.update(update_method=UpdateMethod.SIMPLE_UPDATE)


def build(*, servers: int, per_rack: int = 2, sites: int = 1, nvl_size: int = 0, bmc_url=None,
          vbios: str | dict[int, str] = OLD_VBIOS, gpus_per_server: int = 1, new_vbios: str = NEW_VBIOS) -> Fleet:
    """``servers`` servers, ``per_rack`` per rack, racks spread over ``sites``; ``nvl_size`` > 0 groups consecutive
    servers into NVLink domains of that size; ``bmc_url(n)`` gives server n's BMC address; ``vbios`` is one
    version or {server index: version}."""
    use_simple_update()
    fleet = Fleet()
    fleet.sites = [factories.site() for _ in range(sites)]
    rack = None
    domain = None
    for n in range(servers):
        site = fleet.sites[(n // per_rack) % sites]
        if n % per_rack == 0:
            rack = factories.rack(site)
        if nvl_size and n % nvl_size == 0:
            domain = NvlinkDomain.objects.create(site=site, name=f"nvl-{site.code}-{n}")
        server = factories.server(rack, rack_unit=1 + (n % per_rack) * 8)
        fields = {}
        if bmc_url is not None:
            fields["bmc_address"] = bmc_url(n)
        if nvl_size:
            fields["nvlink_domain"] = domain
        if fields:
            services.record_update(obj=server, actor=SYSTEM, **fields)
        version = vbios.get(n, OLD_VBIOS) if isinstance(vbios, dict) else vbios
        for slot in range(1, gpus_per_server + 1):
            factories.gpu(server, slot=slot, vbios_version=version,
                          pci_bus_id=f"00000000:{0x10 + slot:02X}:00.0")
        fleet.servers.append(server)
    fleet.bundle = fw_factories.bundle({"gpu_vbios": new_vbios})
    return fleet


def approved(fleet: Fleet, creator, approver, *, strategy: dict | None = None, selector: dict | None = None,
             name: str = "vbios rollout") -> Rollout:
    rollout = svc.rollout_create(name=name, bundle=fleet.bundle, selector=selector or {}, strategy=strategy or {},
                                 actor=creator)
    rollout = svc.rollout_submit(rollout=rollout, actor=creator)
    return svc.rollout_approve(rollout=rollout, actor=approver)


def release(version: str = NEW_VBIOS) -> Release:
    return Release.objects.get(component="gpu_vbios", version=version)
