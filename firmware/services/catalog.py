"""Every write to the firmware catalog: component specs, releases, bundles, baselines, pools and maintenance
windows. Keyword-only, one transaction each, audited; bad input raises ValidationError with field errors."""

from __future__ import annotations

import datetime as dt
import hashlib
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from firmware.inventory_map import DEFAULT_PATTERNS
from firmware.models import (  # noqa: F401  (CATALOGUED, COMPONENT_SPECS, PER_GPU: re-exported)
    CATALOGUED,
    COMPONENT_SPECS,
    PER_GPU,
    Activation,
    Baseline,
    Bundle,
    BundleItem,
    Channel,
    ComponentSpec,
    MaintenanceWindow,
    Pool,
    Release,
    UpdateMethod,
    WindowKind,
    version_key,
)
from fleet.audit import Actor, audit_write, audited_create, audited_update, diff, snapshot
from fleet.models import AuditAction
from inventory.models import FirmwareComponent as C
from inventory.models import GpuModel, Server, ServerPlatform, Site

# --- component specs ---------------------------------------------------------------------------------------

# COMPONENT_SPECS, CATALOGUED, PER_GPU: firmware.models (next to ComponentSpec); re-exported here.
_PATTERNS = dict(DEFAULT_PATTERNS)


@transaction.atomic
def component_specs_ensure(*, actor: Actor | None) -> int:
    """Create the spec of every catalogued component that has none (existing rows are never changed, so an
    operator's edits survive). Idempotent; returns how many were created."""
    existing = set(ComponentSpec.objects.values_list("component", flat=True))
    created = 0
    for component, per_gpu, method, activation, order in COMPONENT_SPECS:
        if component in existing:
            continue
        audited_create(model_class=ComponentSpec, actor=actor, component=component, per_gpu=per_gpu,
                       update_method=method, activation=activation, inventory_pattern=_PATTERNS[component],
                       apply_order=order)
        created += 1
    return created


# --- releases ----------------------------------------------------------------------------------------------

# What identifies a release's image: fixed once it exists (design/rollouts.md 4.1: artifacts are immutable).
_RELEASE_IMMUTABLE = ("component", "version", "sha256", "size_bytes", "image_url", "image_file")


def _check_sha256(sha256: str) -> str:
    value = sha256.strip().lower()
    if len(value) != 64 or any(ch not in "0123456789abcdef" for ch in value):
        raise ValidationError({"sha256": "A SHA-256 is 64 hexadecimal characters."})
    return value


# --- image integrity: Fleet hashes the bytes itself -----------------------------------------------------------

IMAGE_CHUNK = 1 << 20


def image_sha256(chunks: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def _upload_sha256(image_file: UploadedFile) -> str:
    image_file.seek(0)
    value = image_sha256(image_file.chunks(IMAGE_CHUNK))
    image_file.seek(0)
    return value


def release_image_refusal(*, release_id: int, image: bytes | None) -> str | None:
    """Why the bytes about to be sent are not release ``release_id``'s image (None: they are, or nothing is sent:
    the BMC pulls a URL). The rollout engine asks this just before it uploads an image to a BMC."""
    if image is None:
        return None
    release = Release.objects.get(pk=release_id)
    actual = hashlib.sha256(image).hexdigest()
    if actual != release.sha256:
        return (f"the image of {release} changed since it was catalogued: its SHA-256 is now {actual[:16]}…, "
                f"the catalog says {release.sha256[:16]}…; not sent (replace the file or the release)")
    return None


def release_image_fetch(*, release: Release, actor: Actor | None, timeout: float = 30.0) -> bytes:
    """The image of ``release``: its uploaded file, or its URL fetched by Fleet. The first fetch of a URL hashes
    the bytes: they must match the release's SHA-256 (ValidationError otherwise, nothing recorded), and the
    match is recorded (``image_verified_at``, audited). Later fetches are checked by the engine's own hash."""
    if release.image_file:
        with release.image_file.open("rb") as handle:
            return handle.read()
    try:
        with urllib.request.urlopen(release.image_url, timeout=timeout) as response:  # noqa: S310 - http(s) URLField
            data = response.read()
    except (OSError, ValueError) as exc:
        raise ValidationError({"image_url": f"Fleet could not fetch {release.image_url}: {exc}"}) from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != release.sha256:
        raise ValidationError({"sha256": f"The image at {release.image_url} has SHA-256 {actual}; the release "
                                         f"declares {release.sha256}. It is not used."})
    if release.image_verified_at is None:
        with transaction.atomic():
            audited_update(obj=release, actor=actor, image_verified_at=timezone.now())
    return data


@transaction.atomic
def release_create(*, component: str, version: str, actor: Actor | None, sha256: str = "", size_bytes: int = 0,
                   image_url: str = "", image_file: UploadedFile | None = None,
                   platforms: Iterable[ServerPlatform] = (), gpu_models: Iterable[GpuModel] = (),
                   notes: str = "", channel: str = Channel.TESTING, min_from_version: str = "",
                   released_at: dt.date | None = None) -> Release:
    """A new firmware image. Needs an image URL or an uploaded file; a release starts in ``testing`` unless told
    otherwise and cannot start ``revoked``.

    An uploaded file is hashed here: its SHA-256 is the release's; a declared one that differs is an error. A URL
    needs its declared SHA-256 (checked when Fleet first fetches the image, ``release_image_fetch``)."""
    errors: dict[str, str] = {}
    version = version.strip()
    if component not in CATALOGUED:
        errors["component"] = f"{component!r} is not a catalogued firmware component."
    if not version:
        errors["version"] = "A version is required."
    if not image_url and image_file is None:
        errors["image_url"] = "Give an image URL or upload the image file."
    if image_url and image_file is not None:
        errors["image_file"] = "Give an image URL or a file, not both."
    if channel == Channel.REVOKED:
        errors["channel"] = "A new release cannot start revoked."
    if image_url and not sha256.strip():
        errors["sha256"] = "An image URL needs its SHA-256 (Fleet checks it when it first fetches the image)."
    if errors:
        raise ValidationError(errors)
    if image_file is not None:
        actual = _upload_sha256(image_file)
        if sha256.strip() and _check_sha256(sha256) != actual:
            raise ValidationError({"sha256": f"The uploaded image's SHA-256 is {actual}; the declared "
                                             f"{sha256.strip().lower()} differs. Check the file, or leave the "
                                             "SHA-256 empty to take the file's."})
        sha256 = actual
    if image_file is not None and not size_bytes:
        size_bytes = image_file.size or 0
    if Release.objects.filter(component=component, version__iexact=version).exists():
        raise ValidationError({"version": f"{C(component).label} {version} is already in the catalog."})
    release = Release(component=component, version=version, sha256=_check_sha256(sha256), size_bytes=size_bytes,
                      image_url=image_url, image_file=image_file or "", notes=notes, channel=channel,
                      min_from_version=min_from_version.strip(), released_at=released_at)
    release.full_clean()
    release.save()
    release.platforms.set(list(platforms))
    release.gpu_models.set(list(gpu_models))
    audit_write(actor=actor, action=AuditAction.CREATE, obj=release, changes=diff({}, snapshot(release)))
    return release


@transaction.atomic
def release_update(*, release: Release, actor: Actor | None, **fields: Any) -> dict[str, list[Any]]:
    """Edit a release's notes, applicability (platforms, SKUs), lowest upgradable version or release date.
    The image (component, version, hash, size, URL, file) never changes; the channel has its own service."""
    frozen = sorted(set(fields) & {*_RELEASE_IMMUTABLE, "channel"})
    if frozen:
        raise ValidationError({name: ("Use release_set_channel." if name == "channel" else
                                      "Fixed once the release exists: create a new release.") for name in frozen})
    if "min_from_version" in fields:
        fields["min_from_version"] = fields["min_from_version"].strip()
    return audited_update(obj=release, actor=actor, before=snapshot(release), **fields)


@transaction.atomic
def release_set_channel(*, release: Release, channel: str, actor: Actor | None, reason: str) -> Release:
    """Move a release between testing, stable and revoked. Revoking needs a reason (kept on the release);
    a revoked release leaves no baseline or rollout to use it, which the rollout engine checks."""
    if channel not in Channel.values:
        raise ValidationError({"channel": f"Choose one of {', '.join(Channel.values)}."})
    reason = reason.strip()
    if channel == Channel.REVOKED and not reason:
        raise ValidationError({"reason": "Say why the release is revoked."})
    release = Release.objects.select_for_update().get(pk=release.pk)
    if release.channel == channel:
        return release
    before = snapshot(release)
    release.channel = channel
    release.revoked_reason = reason if channel == Channel.REVOKED else ""
    release.save(update_fields=["channel", "revoked_reason"])
    audit_write(actor=actor, action=AuditAction.UPDATE, obj=release, message=reason,
                changes={"channel": [before["channel"], channel]})
    return release


# --- bundles -----------------------------------------------------------------------------------------------

def _release_applies(release: Release, platform: ServerPlatform) -> bool:
    platform_ids = [p.pk for p in release.platforms.all()]
    return not platform_ids or platform.pk in platform_ids


@transaction.atomic
def bundle_create(*, name: str, platform: ServerPlatform, releases: Sequence[Release], actor: Actor | None,
                  notes: str = "") -> Bundle:
    """A recipe: one release per component for ``platform``, applied in the components' ``apply_order``
    (BMC first). Refuses revoked releases, releases for other platforms and two releases of one component."""
    name = name.strip()
    errors: dict[str, str] = {}
    if not name:
        errors["name"] = "A name is required."
    elif Bundle.objects.filter(name__iexact=name).exists():
        errors["name"] = f"A bundle named {name!r} exists."
    releases = list(Release.objects.filter(pk__in=[r.pk for r in releases]).prefetch_related("platforms"))
    problems: list[str] = []
    if not releases:
        problems.append("A bundle needs at least one release.")
    seen: dict[str, Release] = {}
    for release in releases:
        if release.component in seen:
            problems.append(f"Two releases of {release.get_component_display()}: {seen[release.component].version} "
                            f"and {release.version}.")
        seen[release.component] = release
        if release.channel == Channel.REVOKED:
            problems.append(f"{release} is revoked.")
        if not _release_applies(release, platform):
            problems.append(f"{release} does not apply to {platform}.")
    if problems:
        errors["releases"] = " ".join(problems)
    if errors:
        raise ValidationError(errors)
    order = dict(ComponentSpec.objects.values_list("component", "apply_order"))
    bundle = audited_create(model_class=Bundle, actor=actor, name=name, platform=platform, notes=notes,
                            created_by=actor if getattr(actor, "is_authenticated", False) else None)
    ranked = sorted(releases, key=lambda r: (order.get(r.component, 50), r.component))
    BundleItem.objects.bulk_create([BundleItem(bundle=bundle, release=r, component=r.component, order=(i + 1) * 10)
                                    for i, r in enumerate(ranked)])
    audit_write(actor=actor, action=AuditAction.UPDATE, obj=bundle,
                changes={"items": [None, [f"{r.component}={r.version}" for r in ranked]]})
    assert isinstance(bundle, Bundle)
    return bundle


def bundle_for_release(*, release: Release, platform: ServerPlatform, actor: Actor | None) -> Bundle:
    """The one-release bundle of ``release`` on ``platform``, made for the person who rolls the release out
    (an existing bundle holding exactly this release on this platform is reused)."""
    for bundle in Bundle.objects.filter(platform=platform, items__release=release).prefetch_related("items"):
        if len(bundle.items.all()) == 1:
            return bundle
    return bundle_create(name=f"{release} on {platform}"[:100], platform=platform, releases=[release], actor=actor,
                         notes=f"Made to roll out {release} alone.")


# --- pools -------------------------------------------------------------------------------------------------

@transaction.atomic
def pool_create(*, name: str, actor: Actor | None, kind: str = Pool.Kind.SLURM,
                servers: Iterable[Server] = ()) -> Pool:
    name = name.strip()
    if Pool.objects.filter(name__iexact=name).exists():
        raise ValidationError({"name": f"A pool named {name!r} exists."})
    pool = audited_create(model_class=Pool, actor=actor, name=name, kind=kind, servers=list(servers))
    assert isinstance(pool, Pool)
    return pool


@transaction.atomic
def pool_update(*, pool: Pool, actor: Actor | None, **fields: Any) -> dict[str, list[Any]]:
    """Rename a pool, change its kind or its servers (``servers=[...]`` replaces the membership)."""
    return audited_update(obj=pool, actor=actor, **fields)


# --- baselines ---------------------------------------------------------------------------------------------

def _overlapping(*, platform: ServerPlatform, pool: Pool | None, valid_from: dt.datetime,
                 valid_to: dt.datetime | None, exclude: int | None = None) -> Baseline | None:
    qs = Baseline.objects.filter(platform=platform, pool=pool).filter(Q(valid_to__isnull=True) |
                                                                      Q(valid_to__gt=valid_from))
    if valid_to is not None:
        qs = qs.filter(valid_from__lt=valid_to)
    if exclude is not None:
        qs = qs.exclude(pk=exclude)
    return qs.select_related("bundle").order_by("valid_from", "id").first()


def _window_text(valid_from: dt.datetime, valid_to: dt.datetime | None) -> str:
    return f"{valid_from:%Y-%m-%d %H:%M} to {f'{valid_to:%Y-%m-%d %H:%M}' if valid_to else 'open end'}"


@transaction.atomic
def baseline_create(*, bundle: Bundle, actor: Actor | None, pool: Pool | None = None,
                    valid_from: dt.datetime | None = None, valid_to: dt.datetime | None = None) -> Baseline:
    """Propose ``bundle`` as the desired firmware of its platform (or of one pool's servers of that platform)
    from ``valid_from`` (default now) to ``valid_to`` (default open). It is in force once approved
    (:func:`baseline_approve`). Refused when it overlaps another baseline of the same platform and pool:
    end that one first (:func:`baseline_end`)."""
    valid_from = valid_from or timezone.now()
    if valid_to is not None and valid_to <= valid_from:
        raise ValidationError({"valid_to": "The end must come after the start."})
    platform = ServerPlatform.objects.select_for_update().get(pk=bundle.platform_id)  # serialises overlap checks
    clash = _overlapping(platform=platform, pool=pool, valid_from=valid_from, valid_to=valid_to)
    if clash is not None:
        scope = f"pool {pool}" if pool else "all pools"
        raise ValidationError({"valid_from": (
            f"Overlaps baseline #{clash.pk} ({clash.bundle}, {_window_text(clash.valid_from, clash.valid_to)}) "
            f"for {platform}, {scope}. End that baseline before this one starts.")})
    baseline = audited_create(model_class=Baseline, actor=actor, bundle=bundle, platform=platform, pool=pool,
                              valid_from=valid_from, valid_to=valid_to,
                              created_by=actor if getattr(actor, "is_authenticated", False) else None)
    assert isinstance(baseline, Baseline)
    return baseline


@transaction.atomic
def baseline_approve(*, baseline: Baseline, actor: Actor | None) -> Baseline:
    """Put a proposed baseline in force. Refused when its bundle holds a revoked release, and (two-person
    rule, as for rollouts; the model has a constraint too) when ``actor`` proposed it."""
    baseline = Baseline.objects.select_for_update().get(pk=baseline.pk)
    if not baseline.proposed:
        return baseline
    revoked = list(Release.objects.filter(bundle_items__bundle=baseline.bundle_id, channel=Channel.REVOKED))
    if revoked:
        raise ValidationError({"bundle": f"The bundle holds revoked releases: {', '.join(map(str, revoked))}."})
    if not getattr(actor, "is_authenticated", False):
        raise ValidationError("A baseline is approved by a person.")
    if getattr(actor, "pk", None) == baseline.created_by_id:
        raise ValidationError("Whoever proposed a baseline cannot approve it: a second person must.",
                              code="two_person_rule")
    audited_update(obj=baseline, actor=actor, approved_by=actor)
    return baseline


@transaction.atomic
def baseline_end(*, baseline: Baseline, actor: Actor | None, ends_at: dt.datetime | None = None) -> Baseline:
    """Close a baseline's validity window at ``ends_at`` (default now), so a successor can start then."""
    ends_at = ends_at or timezone.now()
    if ends_at <= baseline.valid_from:
        raise ValidationError({"ends_at": "A baseline ends after it starts."})
    audited_update(obj=baseline, actor=actor, valid_to=ends_at)
    return baseline


# --- maintenance windows -----------------------------------------------------------------------------------

@transaction.atomic
def window_create(*, name: str, actor: Actor | None, kind: str = WindowKind.ALLOW, site: Site | None = None,
                  pool: Pool | None = None, starts_at: dt.datetime | None = None, ends_at: dt.datetime | None = None,
                  weekdays: str = "", start_time: dt.time | None = None, duration_minutes: int | None = None,
                  timezone_name: str = "UTC", enabled: bool = True) -> MaintenanceWindow:
    """A one-off window (``starts_at``..``ends_at``) or a weekly one (``weekdays`` "1,3" + ``start_time`` +
    ``duration_minutes`` in ``timezone_name``), allowing activations or (``kind=freeze``) forbidding them."""
    errors: dict[str, str] = {}
    one_off = starts_at is not None or ends_at is not None
    weekly = bool(weekdays) or start_time is not None or duration_minutes is not None
    if one_off == weekly:
        errors["__all__"] = "Give either a start and an end, or weekdays with a start time and a duration."
    if one_off and (starts_at is None or ends_at is None or ends_at <= starts_at):
        errors["ends_at"] = "A one-off window needs a start and a later end."
    if weekly:
        days = [d.strip() for d in weekdays.split(",") if d.strip()]
        if not days or any(d not in "1234567" or len(d) != 1 for d in days):
            errors["weekdays"] = "Weekdays are ISO numbers 1 (Monday) to 7, comma-separated."
        weekdays = ",".join(sorted(set(days)))
        if start_time is None:
            errors["start_time"] = "A weekly window needs a start time."
        if not duration_minutes or duration_minutes > 7 * 24 * 60:
            errors["duration_minutes"] = "A weekly window lasts between 1 minute and a week."
    if site is not None and pool is not None:
        errors["pool"] = "Scope a window to a site or a pool, not both."
    try:
        import zoneinfo

        zoneinfo.ZoneInfo(timezone_name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        errors["timezone"] = f"Unknown time zone {timezone_name!r}."
    if errors:
        raise ValidationError(errors)
    window = MaintenanceWindow(name=name.strip(), kind=kind, site=site, pool=pool, starts_at=starts_at,
                               ends_at=ends_at, weekdays=weekdays, start_time=start_time,
                               duration_minutes=duration_minutes, timezone=timezone_name, enabled=enabled)
    window.full_clean()
    window.save()
    audit_write(actor=actor, action=AuditAction.CREATE, obj=window, changes=diff({}, snapshot(window)))
    return window
