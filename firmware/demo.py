"""Firmware's demo seeding (``make run``, ``manage.py bootstrap --demo-gpus``): the catalog, baselines, pools,
windows and each demo server's firmware (:func:`firmware_demo_seed`), then a demo rollout on the BMC simulator
(``rollout_demo_create``, which lives with the rollout engine and is re-exported here). Demo only: no service
imports this module."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from firmware.models import PER_GPU, Bundle, Channel, Pool, WindowKind, version_key
from firmware.services.catalog import (
    baseline_approve,
    baseline_create,
    bundle_create,
    component_specs_ensure,
    pool_create,
    release_create,
    window_create,
)
from firmware.services.compliance import compliance_recompute
from firmware.services.rollout_demo import rollout_demo_create
from fleet.audit import Actor, SystemActor
from inventory import services as inventory_services
from inventory.models import FirmwareComponent as C
from inventory.models import Gpu, Server, ServerPlatform

__all__ = ["DEMO_VERSIONS", "firmware_demo_seed", "rollout_demo_create"]

# Per platform of the demo fleet (inventory.seed.catalog.SKUS): (older, current, next) versions. The current
# VBIOS is the one most GPUs of the inventory seed run (it flashes the GPUs of a server alike); the demo
# seed then puts each server's other components on the recipe its VBIOS belongs to (see firmware_demo_seed).
# Realistic demo values, not a support matrix.
DEMO_VERSIONS: dict[str, dict[str, tuple[str, str, str]]] = {
    "HGX H100 8-GPU": {
        C.BMC: ("01.01.16", "01.03.19", "01.04.11"), C.HMC: ("HGX-22.10-1-rc80", "HGX-24.04-1-rc12", "HGX-24.09-1-rc30"),
        C.SBIOS: ("2.1", "2.4", "2.7a"), C.GPU_VBIOS: ("96.00.74.00.1C", "96.00.99.00.01", "96.00.9A.00.01"),
        C.GPU_INFOROM_IMAGE: ("", "G520.0200.00.05", "G520.0200.00.05"), C.CPLD: ("0.1A", "0.1C", "0.1E"),
        C.EROT: ("00.02.0180.0000_n00", "00.02.0182.0000_n04", "00.02.0190.0000_n00"),
        C.NVSWITCH: ("96.10.55.00.01", "96.10.6D.00.01", "96.10.73.00.01"), C.NIC: ("28.37.1014", "28.39.1002", "28.43.2026"),
    },
    "HGX H200 8-GPU": {
        C.BMC: ("7.00.00.173", "7.10.70.00", "7.10.80.00"), C.HMC: ("HGX-24.04-1-rc12", "HGX-24.10-1-rc30", "HGX-25.02-1-rc8"),
        C.SBIOS: ("2.2.8", "2.3.5", "2.4.1"), C.GPU_VBIOS: ("96.00.9E.00.02", "96.00.A5.00.01", "96.00.AF.00.03"),
        C.GPU_INFOROM_IMAGE: ("", "G520.0280.00.01", "G520.0280.00.01"), C.CPLD: ("0.2A", "0.2C", "0.2C"),
        C.EROT: ("00.02.0182.0000_n04", "00.02.0190.0000_n00", "00.02.0195.0000_n00"),
        C.NVSWITCH: ("96.10.6D.00.01", "96.10.73.00.01", "96.10.79.00.01"), C.NIC: ("28.39.1002", "28.41.1000", "28.43.2026"),
    },
    "HGX B200 8-GPU": {
        C.BMC: ("01.04.02", "01.04.08", "01.05.02"), C.HMC: ("HGX-B200-24.11-1-rc33", "HGX-B200-25.03-1-rc10",
                                                               "HGX-B200-25.06-1-rc4"),
        C.SBIOS: ("1.2", "1.3", "1.4"), C.GPU_VBIOS: ("97.00.5A.00.01", "97.00.6B.00.03", "97.00.82.00.01"),
        C.GPU_INFOROM_IMAGE: ("", "G525.0220.00.02", "G525.0220.00.02"), C.CPLD: ("0.3A", "0.3B", "0.3D"),
        C.EROT: ("01.03.0150.0000_n04", "01.03.0183.0000_n04", "01.04.0008.0000_n04"),
        C.NVSWITCH: ("35.2014.1638", "35.2014.1700", "35.2014.1752"), C.NIC: ("28.41.1000", "28.43.2026", "28.46.3048"),
    },
}
DEMO_SINGLE_DRIFT_PERCENT = 3  # servers on the baseline but for one server component, one version behind
DEMO_SHA = "0" * 64


def _demo_approver(actor: Actor | None) -> Any:
    """Demo baselines are approved by ``actor`` when it is a person, else by the first superuser."""
    if getattr(actor, "is_authenticated", False):
        return actor
    return get_user_model().objects.filter(is_superuser=True).order_by("id").first()


def _demo_server_versions(platforms: dict[str, ServerPlatform], next_pool: set[int]) -> list[tuple[int, str, str]]:
    """Every server component of every demo server, drifting per server as a real fleet does: a server is on
    the recipe its GPUs' VBIOS belongs to (the inventory seed flashed them: older -> one bundle behind on every
    component, current -> on the baseline, next -> a pilot already on the next recipe); the servers of a pool
    with the next baseline run the next recipe; a few servers on the baseline lag on one component.
    One grouped query; the versions go in with one ``firmware_observe_many``."""
    names = {p.pk: name for name, p in platforms.items()}
    servers = (Server.objects.filter(platform__in=platforms.values()).annotate(vbios=Min("gpus__vbios_version"))
               .values_list("id", "platform_id", "vbios").order_by("id"))
    rows = []
    for sid, platform_id, vbios in servers:
        versions = DEMO_VERSIONS[names[platform_id]]
        server_components = [c for c in versions if c not in PER_GPU]
        vbios_key = version_key(vbios or "")
        tier = next((i for i, v in enumerate(versions[C.GPU_VBIOS]) if version_key(v) == vbios_key), 1)
        if sid in next_pool:
            tier = 2
        lagging = (server_components[sid % len(server_components)]
                   if tier == 1 and (sid * 37) % 100 < DEMO_SINGLE_DRIFT_PERCENT else None)
        rows += [(sid, c, versions[c][0 if c == lagging else tier]) for c in server_components]
    return rows


@transaction.atomic
def firmware_demo_seed(*, actor: Actor | None) -> dict[str, Any]:
    """The firmware side of the demo fleet: releases, a current and a next bundle per demo platform, baselines
    in force (approved by a superuser), two pools (one with its own baseline), a weekly maintenance window and
    a freeze, each server's component versions (drift correlated per server: :func:`_demo_server_versions`),
    one NVLink domain with mixed VBIOS, then compliance. Idempotent: does nothing when the catalog already has bundles.
    Set-based: about 1 s at 2,000 GPUs and a few seconds at 100,000 (the observations go in with COPY)."""
    component_specs_ensure(actor=actor)
    if Bundle.objects.exists():
        return {"skipped": "the firmware catalog already has bundles"}
    platforms = {p.name: p for p in ServerPlatform.objects.filter(name__in=DEMO_VERSIONS)}
    if not platforms:
        return {"skipped": "no demo platforms in the inventory"}
    now = timezone.now()
    wanted: dict[tuple[str, str], set[ServerPlatform]] = {}
    for name, platform in platforms.items():
        for component, versions in DEMO_VERSIONS[name].items():
            for version in versions[1:]:
                wanted.setdefault((component, version), set()).add(platform)
    releases = {}
    for (component, version), plats in sorted(wanted.items(), key=lambda kv: kv[0]):
        nxt = all(DEMO_VERSIONS[p.name][component][2] == version != DEMO_VERSIONS[p.name][component][1]
                  for p in plats)
        releases[component, version] = release_create(
            component=component, version=version, sha256=DEMO_SHA, actor=actor, platforms=sorted(plats, key=str),
            image_url=f"https://firmware.example.internal/{component}/{version}.fwpkg",
            channel=Channel.TESTING if nxt else Channel.STABLE,
            notes="Demo release." if not nxt else "Demo release: next recipe, in testing.")
    approver = _demo_approver(actor)
    proposer = SystemActor("demo") if approver is not None else actor  # two-person rule: not the approver
    bundles: dict[str, dict[str, Bundle]] = {}
    for name, platform in sorted(platforms.items()):
        versions = DEMO_VERSIONS[name]
        bundles[name] = {
            label: bundle_create(name=f"{name} {label}", platform=platform, actor=actor,
                                 notes=f"Demo recipe ({label}).",
                                 releases=[releases[c, v[index]] for c, v in versions.items()])
            for label, index in (("current", 1), ("next", 2))}
        baseline = baseline_create(bundle=bundles[name]["current"], actor=proposer,
                                   valid_from=now - dt.timedelta(days=30))
        if approver is not None:
            baseline_approve(baseline=baseline, actor=approver)
    # Pools: a Slurm training partition and a Kubernetes inference pool; the inference pool runs the next recipe.
    by_platform = {name: list(Server.objects.filter(platform=p).order_by("id").values_list("id", flat=True)[:48])
                   for name, p in platforms.items()}
    first, *rest = sorted(platforms)
    train = pool_create(name="slurm-train-a", kind=Pool.Kind.SLURM, actor=actor,
                        servers=Server.objects.filter(pk__in=by_platform[first][:32]))
    second = rest[0] if rest else first
    infer = pool_create(name="k8s-inference", kind=Pool.Kind.KUBERNETES, actor=actor,
                        servers=Server.objects.filter(pk__in=by_platform[second][-16:]))
    pool_baseline = baseline_create(bundle=bundles[second]["next"], pool=infer, actor=proposer,
                                    valid_from=now - dt.timedelta(days=2))
    if approver is not None:
        baseline_approve(baseline=pool_baseline, actor=approver)
    window_create(name="Weekly maintenance (Tue, Thu 02:00 UTC)", actor=actor, weekdays="2,4",
                  start_time=dt.time(2, 0), duration_minutes=180)
    window_create(name="Year-end change freeze", kind=WindowKind.FREEZE, actor=actor,
                  starts_at=now + dt.timedelta(days=20), ends_at=now + dt.timedelta(days=34))
    observed = inventory_services.firmware_observe_many(
        server_versions=_demo_server_versions(platforms, next_pool=set(infer.servers.values_list("id", flat=True))),
        source="redfish", seen_at=now, actor=actor)
    # One NVLink domain with mixed firmware: one GPU of a training-pool server reports another VBIOS.
    mixed = Gpu.objects.filter(server_id__in=by_platform[first][:32], module_id=8).order_by("server_id").first()
    if mixed is not None:
        other = next(v for v in DEMO_VERSIONS[first][C.GPU_VBIOS][::-1] if v != mixed.vbios_version)
        inventory_services.firmware_observe(gpu=mixed, component=C.GPU_VBIOS, version=other,
                                            source="nvidia-smi-xml", seen_at=now, actor=actor)
    compliance = compliance_recompute()
    return {"releases": len(releases), "bundles": 2 * len(platforms), "pools": [train.name, infer.name],
            "observations": observed, "compliance": compliance}
