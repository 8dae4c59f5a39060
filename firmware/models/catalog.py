"""Firmware catalog: how each component updates, the releases, bundles (recipes), baselines, pools and
maintenance windows. Observed versions are ``inventory.FirmwareObservation`` (and the GPU's own
``vbios_version`` / ``inforom_image`` columns)."""

from __future__ import annotations

import re

from django.conf import settings
from django.db import models
from django.db.models import Q

from inventory.models import FirmwareComponent, GpuModel, Server, ServerPlatform, Site

_SEGMENT = re.compile(r"\d+|[a-z]+")
_VBIOS = re.compile(r"[0-9a-f]{2}(\.[0-9a-f]{2}){3,}")


def version_key(version: str) -> str:
    """A string that sorts like the version: numeric segments zero-padded, letters lower-cased.

    VBIOS-style versions (``96.00.89.00.01``, ``97.00.0D.00.00``) are hex byte groups: ``9A`` > ``89``.
    Case never matters (``25.06-A`` = ``25.06-a``; nvfwupd and the BMC disagree on case).
    """
    text = version.strip().lower()
    if _VBIOS.fullmatch(text):
        return ".".join(str(int(part, 16)).rjust(10, "0") for part in text.split("."))
    return ".".join(token.rjust(10, "0") if token.isdigit() else token for token in _SEGMENT.findall(text))


class UpdateMethod(models.TextChoices):
    SIMPLE_UPDATE = "simple_update", "Redfish SimpleUpdate"
    MULTIPART_PUSH = "multipart_push", "Redfish multipart push"
    INBAND = "inband", "In-band tool"


class Activation(models.TextChoices):
    NONE = "none", "None (live)"
    BMC_RESET = "bmc_reset", "BMC reset"
    HOST_REBOOT = "host_reboot", "Host reboot"
    CHASSIS_POWER_CYCLE = "chassis_power_cycle", "Chassis power cycle"
    AC_POWER_CYCLE = "ac_power_cycle", "AC power cycle"


# (component, per GPU, update method, activation, apply order). Activation per the matrix in
# design/rollouts.md section 1.7: BMC -> BMC reset (the HMC too); SBIOS -> chassis power cycle; CPLD, ERoT ->
# AC power cycle; VBIOS, InfoROM, NVSwitch -> chassis power cycle; PSU -> live; NIC, DPU -> in-band tool.
# Order: the BMCs first, then what they update, the NICs last.
COMPONENT_SPECS: tuple[tuple[str, bool, str, str, int], ...] = (
    (FirmwareComponent.BMC, False, UpdateMethod.SIMPLE_UPDATE, Activation.BMC_RESET, 10),
    (FirmwareComponent.HMC, False, UpdateMethod.MULTIPART_PUSH, Activation.BMC_RESET, 20),
    (FirmwareComponent.EROT, False, UpdateMethod.MULTIPART_PUSH, Activation.AC_POWER_CYCLE, 30),
    (FirmwareComponent.SBIOS, False, UpdateMethod.SIMPLE_UPDATE, Activation.CHASSIS_POWER_CYCLE, 40),
    (FirmwareComponent.CPLD, False, UpdateMethod.MULTIPART_PUSH, Activation.AC_POWER_CYCLE, 50),
    (FirmwareComponent.GPU_VBIOS, True, UpdateMethod.MULTIPART_PUSH, Activation.CHASSIS_POWER_CYCLE, 60),
    (FirmwareComponent.GPU_INFOROM_IMAGE, True, UpdateMethod.MULTIPART_PUSH, Activation.CHASSIS_POWER_CYCLE, 61),
    (FirmwareComponent.NVSWITCH, False, UpdateMethod.MULTIPART_PUSH, Activation.CHASSIS_POWER_CYCLE, 70),
    (FirmwareComponent.NIC, False, UpdateMethod.INBAND, Activation.NONE, 80),
    (FirmwareComponent.DPU, False, UpdateMethod.INBAND, Activation.HOST_REBOOT, 81),
    (FirmwareComponent.PSU, False, UpdateMethod.SIMPLE_UPDATE, Activation.NONE, 90),
)
CATALOGUED = frozenset(c for c, *_ in COMPONENT_SPECS)
PER_GPU = frozenset(c for c, per_gpu, *_ in COMPONENT_SPECS if per_gpu)


class ComponentSpec(models.Model):
    """How one firmware component is updated and activated, and how it appears in Redfish FirmwareInventory."""

    component = models.CharField(max_length=24, choices=FirmwareComponent.choices, unique=True)
    per_gpu = models.BooleanField(default=False, help_text="One image per GPU (VBIOS, InfoROM) rather than per server")
    update_method = models.CharField(max_length=16, choices=UpdateMethod.choices, default=UpdateMethod.SIMPLE_UPDATE)
    activation = models.CharField(max_length=24, choices=Activation.choices, default=Activation.NONE)
    inventory_pattern = models.CharField(
        max_length=200, blank=True,
        help_text=r"Regular expression for the Redfish FirmwareInventory ids of this component, e.g. HGX_FW_GPU_SXM_\d+")
    apply_order = models.PositiveSmallIntegerField(default=50, help_text="Lower first: the BMC before everything")

    class Meta:
        ordering = ["apply_order", "component"]

    def __str__(self) -> str:
        return self.get_component_display()


class Channel(models.TextChoices):
    TESTING = "testing", "Testing"
    STABLE = "stable", "Stable"
    REVOKED = "revoked", "Revoked"


class Release(models.Model):
    component = models.CharField(max_length=24, choices=FirmwareComponent.choices)
    version = models.CharField(max_length=80)
    version_key = models.CharField(max_length=200, editable=False)
    platforms = models.ManyToManyField(ServerPlatform, blank=True, related_name="firmware_releases",
                                       help_text="Empty: any platform")
    gpu_models = models.ManyToManyField(GpuModel, blank=True, related_name="firmware_releases",
                                        help_text="SKUs it applies to; empty: any")
    sha256 = models.CharField("SHA-256", max_length=64)
    size_bytes = models.PositiveBigIntegerField(default=0)
    image_url = models.URLField(max_length=500, blank=True)
    image_file = models.FileField(upload_to="firmware/", blank=True)
    image_verified_at = models.DateTimeField(null=True, blank=True, editable=False,
                                             help_text="When Fleet first fetched the image URL and found the SHA-256")
    notes = models.TextField(blank=True)
    channel = models.CharField(max_length=10, choices=Channel.choices, default=Channel.TESTING)
    min_from_version = models.CharField(max_length=80, blank=True,
                                        help_text="Lowest installed version this image can upgrade from")
    min_from_key = models.CharField(max_length=200, blank=True, editable=False)
    released_at = models.DateField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Outcome counters for demotion (LVFS): kept by the rollout engine.
    success_count = models.PositiveIntegerField(default=0)
    failure_count = models.PositiveIntegerField(default=0)
    revoked_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["component", "-version_key", "id"]
        constraints = [
            models.UniqueConstraint(fields=["component", "version"], name="release_unique_version"),
            models.CheckConstraint(condition=~Q(image_url="") | ~Q(image_file=""), name="release_has_image"),
        ]
        indexes = [models.Index(fields=["component", "version_key"], name="release_comp_key_idx")]

    def __str__(self) -> str:
        return f"{self.get_component_display()} {self.version}"

    def save(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.version_key = version_key(self.version)
        self.min_from_key = version_key(self.min_from_version) if self.min_from_version else ""
        super().save(*args, **kwargs)


class Bundle(models.Model):
    """A recipe: a named set of releases for one platform, applied in order (BMC first)."""

    name = models.CharField(max_length=100, unique=True)
    platform = models.ForeignKey(ServerPlatform, on_delete=models.PROTECT, related_name="firmware_bundles")
    releases = models.ManyToManyField(Release, through="BundleItem", related_name="bundles")
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class BundleItem(models.Model):
    bundle = models.ForeignKey(Bundle, on_delete=models.CASCADE, related_name="items")
    release = models.ForeignKey(Release, on_delete=models.PROTECT, related_name="bundle_items")
    component = models.CharField(max_length=24, choices=FirmwareComponent.choices, editable=False)
    order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["bundle", "order", "id"]
        constraints = [models.UniqueConstraint(fields=["bundle", "component"], name="bundle_one_per_component")]

    def __str__(self) -> str:
        return f"{self.bundle}: {self.release}"

    def save(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.component = self.release.component
        super().save(*args, **kwargs)


class Pool(models.Model):
    """A scheduler pool: a Slurm partition or a Kubernetes node pool."""

    class Kind(models.TextChoices):
        SLURM = "slurm", "Slurm partition"
        KUBERNETES = "kubernetes", "Kubernetes node pool"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=12, choices=Kind.choices, default=Kind.SLURM)
    servers = models.ManyToManyField(Server, blank=True, related_name="pools")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Baseline(models.Model):
    """The approved bundle for a platform (optionally one pool of it) during a validity window."""

    bundle = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="baselines")
    platform = models.ForeignKey(ServerPlatform, on_delete=models.PROTECT, related_name="firmware_baselines")
    pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=models.PROTECT, related_name="baselines")
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="+")
    # Who proposed it (None: the system, or a baseline older than the two-person rule). Two-person rule, as
    # for rollouts: whoever proposed a baseline cannot approve it.
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["platform", "pool", "-valid_from", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(valid_to__isnull=True) | Q(valid_to__gt=models.F("valid_from")),
                                   name="baseline_window_ordered"),
            models.CheckConstraint(condition=Q(approved_by__isnull=True) | Q(created_by__isnull=True)
                                   | ~Q(approved_by=models.F("created_by")), name="baseline_two_person_rule"),
        ]
        indexes = [models.Index(fields=["platform", "valid_from"], name="baseline_platform_idx")]

    def __str__(self) -> str:
        return f"{self.platform} {self.pool or 'all pools'}: {self.bundle}"

    # Which actions the baseline's state offers; the services, the baseline page and its buttons ask these.
    @property
    def proposed(self) -> bool:
        """Not approved yet: ``approve`` puts it in force (approving an approved baseline changes nothing)."""
        return self.approved_by_id is None

    @property
    def open_ended(self) -> bool:
        """No end yet: the page offers ``end`` (the API may still move an end)."""
        return self.valid_to is None


class WindowKind(models.TextChoices):
    ALLOW = "allow", "Maintenance window"
    FREEZE = "freeze", "Change freeze"


class MaintenanceWindow(models.Model):
    """When activations may happen. A freeze always wins over an allow window that overlaps it.

    One-off (``starts_at``..``ends_at``) or weekly (``weekdays`` + ``start_time`` + ``duration_minutes`` in the
    window's ``timezone``). Scope: everything, or one site, or one pool.
    """

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=8, choices=WindowKind.choices, default=WindowKind.ALLOW)
    site = models.ForeignKey(Site, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    weekdays = models.CharField(max_length=20, blank=True, help_text="Comma-separated ISO weekdays, 1 = Monday")
    start_time = models.TimeField(null=True, blank=True)
    duration_minutes = models.PositiveIntegerField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["kind", "name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(starts_at__isnull=False, ends_at__isnull=False, weekdays="")
                           | Q(starts_at__isnull=True, ends_at__isnull=True, start_time__isnull=False,
                               duration_minutes__isnull=False) & ~Q(weekdays="")),
                name="window_one_off_or_weekly"),
        ]

    def __str__(self) -> str:
        return self.name


class ComplianceState(models.TextChoices):
    COMPLIANT = "compliant", "Compliant"
    DRIFT = "drift", "Drift"
    UNKNOWN = "unknown", "Unknown (not observed)"


class ComplianceStatus(models.Model):
    """One expected component of one server against what was last observed.

    A server component (BMC, SBIOS, ...) has one row (``gpu_count`` 0). A per-GPU component (VBIOS, InfoROM) has
    one row per distinct version its GPUs report, with ``gpu_count`` the number of the server's GPUs reporting
    ``actual`` (the GPUs behind a row are the server's GPUs whose version column equals ``actual``).

    Rewritten as a whole by ``firmware.services.compliance.compliance_recompute`` (INSERT ... SELECT);
    the drift report, the firmware home page and the rollout precheck read it.
    """

    # A derived table rewritten whole (~107,500 rows at 100,000 GPUs): no foreign-key constraints (a check per
    # row) and only the indexes its readers use; nothing it points to is ever deleted (PROTECT everywhere).
    server = models.ForeignKey(Server, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False,
                               related_name="+")
    component = models.CharField(max_length=24, choices=FirmwareComponent.choices)
    baseline = models.ForeignKey(Baseline, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False,
                                 related_name="+")
    expected = models.CharField(max_length=80)
    actual = models.CharField(max_length=80, blank=True)
    status = models.CharField(max_length=10, choices=ComplianceState.choices)
    gpu_count = models.PositiveIntegerField(
        default=0, help_text="GPUs of the server reporting ``actual`` (per-GPU components); 0 for a server component")
    computed_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        indexes = [
            # Only the open findings are indexed: the drift drill-down reads them; compliant rows are most.
            models.Index(fields=["component", "id"], condition=~Q(status="compliant"), name="compliance_open_idx"),
            models.Index(fields=["server", "component"], name="compliance_server_idx"),
        ]

    def __str__(self) -> str:
        gpus = f" x{self.gpu_count} GPUs" if self.gpu_count else ""
        return f"{self.server_id} {self.component} {self.actual or '-'}{gpus}: {self.status}"


class FirmwareTuple(models.Model):
    """The firmware a server runs, as one comparable identity: every catalogued component's current
    version (a GPU component lists each distinct version its GPUs report), hashed. Written with the
    compliance status; read by the scheduler-label export and the mixed-firmware findings."""

    server = models.OneToOneField(Server, primary_key=True, on_delete=models.DO_NOTHING, db_constraint=False,
                                  related_name="+")
    tuple_text = models.TextField(help_text="component=version;... sorted, versions lower-cased")
    tuple_hash = models.CharField(max_length=32)
    mixed = models.BooleanField(default=False, help_text="Its GPUs disagree on a component's version")
    computed_at = models.DateTimeField()

    class Meta:
        ordering = ["server"]
        indexes = [models.Index(fields=["tuple_hash"], name="fwtuple_hash_idx")]

    def __str__(self) -> str:
        return f"{self.server_id}: {self.tuple_hash[:8]}"
