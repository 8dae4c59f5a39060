"""Reading the BMC's inventory: precheck (what a server needs), verification, the chunk's successes recorded."""

from __future__ import annotations

from collections import Counter, defaultdict

from django.db import transaction
from django.db.models import F

from firmware.inventory_map import components_from_inventory
from firmware.models import ErrorClass, RolloutTarget, TargetState, UpdateMethod, version_key
from firmware.redfish import BmcError, bmc_client_forget
from firmware.services.engine import clock
from firmware.services.engine.context import StepContext
from firmware.services.engine.outcomes import Outcome, fail, later
from firmware.services.engine.side_effects import client_for
from firmware.services.rollout import ENGINE


def precheck_step(target: RolloutTarget, ctx: StepContext) -> Outcome:
    """Read the BMC's FirmwareInventory; list the bundle items this server still needs (``work``). Nothing
    needed: skipped (already compliant). A version below the release's lowest upgradable one: failed."""
    client = client_for(target)
    items = ctx.bundle_items(target.rollout.bundle_id)
    ids = client.inventory_ids()
    specs = [ctx.specs[c] for c in ctx.specs if ctx.specs[c].inventory_pattern]
    mapped = components_from_inventory([{"Id": i, "Version": "?"} for i in ids], specs or None)
    by_component: dict[str, list[str]] = defaultdict(list)
    for component, inventory_id, _ in mapped:
        by_component[component].append(inventory_id)
    wanted_ids = sorted({i for item in items for i in by_component.get(item.component, [])})
    docs = dict(zip(wanted_ids, client.inventory(wanted_ids), strict=True))
    versions = {i: str(doc.get("Version") or "") for i, doc in docs.items()}
    work, before, problems = [], {}, []
    for item in items:
        release = item.release
        inv = by_component.get(item.component, [])
        if not inv:
            problems.append(f"the BMC reports no {item.component} item")
            continue
        current = {i: versions.get(i, "") for i in inv}
        before[item.component] = sorted(set(current.values()))
        stale = [i for i, v in current.items() if version_key(v) != release.version_key]
        if not stale:
            continue
        if release.min_from_key and any(version_key(current[i]) < release.min_from_key for i in stale):
            problems.append(f"{item.component} {sorted(set(current[i] for i in stale))} is below the lowest "
                            f"version {release} upgrades from ({release.min_from_version})")
            continue
        spec = ctx.specs.get(item.component)
        method = spec.update_method if spec else UpdateMethod.SIMPLE_UPDATE
        if method == UpdateMethod.INBAND:
            problems.append(f"{item.component} is updated in-band; the Redfish driver cannot do it")
            continue
        if method == UpdateMethod.MULTIPART_PUSH and not release.image_file:
            method = UpdateMethod.SIMPLE_UPDATE  # only a URL: the BMC pulls the image (SimpleUpdate ImageURI)
        work.append({"release": release.pk, "component": item.component, "version": release.version,
                     "image": release.image_url or (release.image_file.url if release.image_file else ""),
                     "method": method,
                     "activation": spec.activation if spec else "none", "targets": stale, "verify": inv,
                     "related": sorted({r["@odata.id"] for i in stale for r in docs[i].get("RelatedItem") or []
                                        if isinstance(r, dict) and r.get("@odata.id")})})
    if problems:
        return fail(target, ErrorClass.FIRMWARE, "precheck: " + "; ".join(problems), [], before=before)
    if not work:
        return Outcome(TargetState.SKIPPED, {"before": before, "after": before,
                                             "last_error": "already compliant"})
    return Outcome(TargetState.STAGING, {"work": work, "before": before, "item_index": 0, "attempts": 0,
                                         "last_error": "", "error_class": ""}, again_now=True)


def verifying_step(target: RolloutTarget, ctx: StepContext) -> Outcome:
    """Every targeted inventory item must report the new version. A BMC that is rebooting answers later; a
    version still old when the deadline passes is a firmware failure."""
    now = clock.now()
    work = target.work
    deadline = target.deadline_at or now
    client = client_for(target)
    try:
        ids = sorted({i for w in work for i in w["verify"]})
        versions = client.versions(ids)
    except BmcError as exc:
        if exc.error_class == ErrorClass.INFRA and now < deadline:
            bmc_client_forget(target.server.bmc_address)
            return later(target, exc.retry_after or 2, last_error=f"waiting for the BMC: {exc}"[:2000])
        raise
    wrong = [f"{i} reports {versions.get(i) or 'nothing'}, expected {w['version']}"
             for w in work for i in w["verify"] if version_key(versions.get(i, "")) != version_key(w["version"])]
    after = {w["component"]: sorted({versions.get(i, "") for i in w["verify"]}) for w in work}
    if not wrong:
        members = [{"Id": i, "Version": v} for i, v in versions.items()]
        return Outcome(TargetState.SUCCEEDED, {"after": after, "last_error": "", "deadline_at": None},
                       succeeded=(target.server, [w["release"] for w in work], members))
    if now < deadline:
        return later(target, 2, last_error="waiting: " + "; ".join(wrong[:3]))
    return fail(target, ErrorClass.FIRMWARE, "verification: " + "; ".join(wrong[:5]),
                 [w["release"] for w in work if any(version_key(versions.get(i, "")) != version_key(w["version"])
                                                    for i in w["verify"])], after=after)


def flush_successes(ctx: StepContext) -> None:
    """Count the chunk's successes on their releases (one UPDATE per release, not one per target on a hot row)
    and record the verified versions as observed firmware (one COPY for server components). A worker killed
    before this loses a chunk's counts and observations, never a target's state: the next inventory sweep
    observes the versions again."""
    if not ctx.succeeded:
        return
    per_release: Counter[int] = Counter(r for _, releases, _ in ctx.succeeded for r in releases)
    from firmware.models import Release

    for release_id, n in per_release.items():
        Release.objects.filter(pk=release_id).update(success_count=F("success_count") + n)
    from firmware.services.catalog import PER_GPU
    from firmware.services.observations import SOURCE, firmware_inventory_record
    from inventory import services as inventory_services

    specs = [s for s in ctx.specs.values() if s.inventory_pattern] or None
    now = clock.now()
    server_rows, per_gpu = [], []
    for server, _releases, members in ctx.succeeded:
        found = components_from_inventory(members, specs)
        if any(c in PER_GPU for c, _i, _v in found):
            per_gpu.append((server, members))  # recorded whole (server and GPU items) below
        else:
            server_rows += [(server.pk, c, v) for c, _i, v in found]
    with transaction.atomic():
        if server_rows:
            inventory_services.firmware_observe_many(server_versions=server_rows, source=SOURCE, seen_at=now,
                                                     actor=ENGINE)
        for server, members in per_gpu:
            firmware_inventory_record(server=server, members=members, seen_at=now, actor=ENGINE, specs=specs)
