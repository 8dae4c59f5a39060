"""The demo rollout (``make run``): a small rollout on the Procfile simulator's BMCs that progresses on its own."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from firmware.models import Bundle, Channel, Release, Rollout
from firmware.services.rollout import rollout_approve, rollout_create, rollout_start, rollout_submit
from fleet.audit import Actor
from fleet.roles import APPROVER

DEMO_PREFIX = "Demo: "


def rollout_demo_create(*, simulator_url: str, actor: Actor | None = None, servers: int = 16,
                        bmc_prefix: str = "demo-", soak_seconds: int = 20) -> Rollout | None:
    """A small rollout that progresses on its own in the demo: ``servers`` servers of a demo platform get BMCs on
    the simulator (``{simulator_url}/bmc/{bmc_prefix}0001`` ...; start it with ``--bmcs N --prefix demo-``), a
    one-release bundle takes their VBIOS to the newest release for the platform, and the rollout is created by the
    first admin, approved by a demo approver (another person) and started; beat's tick does the rest.
    Idempotent: returns the existing demo rollout, or None when the inventory has no platform with servers or
    no VBIOS release for it. Call it after ``firmware_demo_seed``."""
    from django.contrib.auth import get_user_model

    from firmware.models import Rollout as RolloutModel
    from firmware.services.catalog import bundle_create
    from inventory import services as inventory_services
    from inventory.models import Server, ServerPlatform

    existing = RolloutModel.objects.filter(name__startswith=DEMO_PREFIX).order_by("id").first()
    if existing is not None:
        return existing
    platform = (ServerPlatform.objects.filter(name="HGX H100 8-GPU", server__isnull=False).first()
                or ServerPlatform.objects.filter(server__isnull=False).order_by("id").first())
    if platform is None:
        return None
    release = (Release.objects.filter(component="gpu_vbios").exclude(channel=Channel.REVOKED)
               .filter(Q(platforms=platform) | Q(platforms__isnull=True)).order_by("-version_key", "-id").first())
    if release is None:
        return None
    users = get_user_model().objects
    creator = users.filter(is_superuser=True).order_by("id").first()
    approver = users.filter(groups__name=APPROVER, is_superuser=False).order_by("id").first()
    if creator is None:
        return None
    chosen = list(Server.objects.filter(platform=platform).exclude(gpus__vbios_version=release.version)
                  .distinct().order_by("id")[:servers])
    if not chosen:
        return None
    with transaction.atomic():
        for n, server in enumerate(chosen, start=1):
            inventory_services.record_update(obj=server, actor=actor or creator,
                                             bmc_address=f"{simulator_url.rstrip('/')}/bmc/{bmc_prefix}{n:04d}")
        bundle = (Bundle.objects.filter(name=f"{DEMO_PREFIX}VBIOS {release.version}").first()
                  or bundle_create(name=f"{DEMO_PREFIX}VBIOS {release.version}", platform=platform,
                                   releases=[release], actor=creator, notes="The demo rollout's bundle."))
        rollout = rollout_create(
            name=f"{DEMO_PREFIX}VBIOS {release.version} on {len(chosen)} servers", bundle=bundle,
            selector={"_server_ids": [s.pk for s in chosen]}, actor=creator,
            strategy={"waves": [25, 100], "soak_seconds": soak_seconds, "retry": {"max_attempts": 5,
                                                                        "backoff_seconds": [5, 15]}})
        rollout = rollout_submit(rollout=rollout, actor=creator)
        if approver is not None:
            rollout = rollout_approve(rollout=rollout, actor=approver)
            rollout = rollout_start(rollout=rollout, actor=creator)
    return rollout
