"""Servers and GPUs: what they are (GPU models, platforms), where they sit, the state each GPU is in, and what
happened to them (state changes, moves, firmware observations)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from inventory.models.places import NvlinkDomain, Rack, Row, Site


class GpuState(models.TextChoices):
    ORDERED = "ordered", "Ordered"
    RECEIVED = "received", "Received"
    BURN_IN = "burn_in", "Burn-in"
    BURN_IN_FAILED = "burn_in_failed", "Burn-in failed"
    IN_SERVICE = "in_service", "In service"
    DRAINED = "drained", "Drained"
    RMA = "rma", "RMA"
    SPARE = "spare", "Spare"
    DECOMMISSIONING = "decommissioning", "Decommissioning"
    SANITIZED = "sanitized", "Sanitized"
    DISPOSED = "disposed", "Disposed"


class GpuModel(models.Model):
    sku = models.CharField("SKU", max_length=80, unique=True)
    name = models.CharField(max_length=100, unique=True, help_text="Product name as nvidia-smi reports it")
    architecture = models.CharField(max_length=40, blank=True)
    memory_gib = models.PositiveIntegerField(null=True, blank=True)
    tdp_w = models.PositiveIntegerField("TDP (W)", null=True, blank=True)
    slowdown_temp_c = models.PositiveSmallIntegerField(null=True, blank=True)
    shutdown_temp_c = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ServerPlatform(models.Model):
    name = models.CharField(max_length=100, unique=True, help_text="For example HGX H100 8-GPU")
    vendor = models.CharField(max_length=60, blank=True)
    gpu_model = models.ForeignKey(GpuModel, null=True, blank=True, on_delete=models.PROTECT)
    gpu_slots = models.PositiveSmallIntegerField(default=8)
    height_u = models.PositiveSmallIntegerField(default=8)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Server(models.Model):
    hostname = models.CharField(max_length=253, unique=True)
    serial = models.CharField(max_length=100, blank=True)
    platform = models.ForeignKey(ServerPlatform, null=True, blank=True, on_delete=models.PROTECT)
    bmc_address = models.CharField("BMC address", max_length=253, blank=True)
    scheduler_node = models.CharField(max_length=253, blank=True, default="", db_default="",
                                      help_text="The workload scheduler's name for this server (empty: its hostname)")
    rack = models.ForeignKey(Rack, null=True, blank=True, on_delete=models.PROTECT, related_name="servers",
                             help_text="Empty: the server is unplaced and needs a rack position")
    rack_unit = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Lowest rack unit occupied")
    nvlink_domain = models.ForeignKey(NvlinkDomain, null=True, blank=True, on_delete=models.PROTECT,
                                      related_name="servers")
    site = models.ForeignKey(Site, null=True, blank=True, on_delete=models.PROTECT, editable=False,
                             related_name="servers")
    row = models.ForeignKey(Row, null=True, blank=True, on_delete=models.PROTECT, editable=False,
                            related_name="servers")

    class Meta:
        ordering = ["hostname"]
        constraints = [
            models.UniqueConstraint(fields=["rack", "rack_unit"], name="server_unique_rack_unit",
                                    condition=Q(rack__isnull=False, rack_unit__isnull=False)),
            models.CheckConstraint(condition=Q(rack__isnull=False) | Q(rack_unit__isnull=True),
                                   name="server_unit_needs_rack"),
        ]
        indexes = [
            models.Index(fields=["rack", "rack_unit"], name="server_rack_unit_idx"),
            models.Index(fields=["site", "id"], name="server_site_idx"),
            models.Index(fields=["hostname"], name="server_hostname_prefix_idx", opclasses=["varchar_pattern_ops"]),
        ]

    def __str__(self) -> str:
        return self.hostname

    def save(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.hostname = self.hostname.strip().lower()
        if self.rack_id:
            self.site_id, self.row_id = self.rack.site_id, self.rack.row_id
        else:
            self.site_id = self.row_id = None
        super().save(*args, **kwargs)

    @property
    def needs_placement(self) -> bool:
        return self.rack_id is None


class Gpu(models.Model):
    """One physical GPU board.

    ``serial`` and ``uuid`` are identities only when real: masked values (``0000000000000``,
    ``REDACTED``, ``GPU-00000000-...``) are stored as NULL with the raw text in ``*_raw`` and the
    GPU flagged ``identity_masked``, so two boards reporting the same mask are never merged.
    """

    serial = models.CharField(max_length=64, null=True, blank=True, unique=True)
    serial_raw = models.CharField(max_length=64, blank=True)
    uuid = models.CharField("UUID", max_length=64, null=True, blank=True, unique=True)
    uuid_raw = models.CharField("UUID as reported", max_length=64, blank=True)
    identity_masked = models.BooleanField(default=False, help_text="Serial or UUID was masked by the tool")
    # The five foreign keys below carry no index of their own: each leads a composite index of Meta.indexes
    # (model, id), (server, module_id), (site, id), (row, id), (rack, id) that serves the same lookups; five
    # fewer indexes to maintain on every GPU written (an import of 5,000 new GPUs: ~15 % of its COPY).
    model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="gpus", db_index=False)
    board_part_number = models.CharField(max_length=64, blank=True)
    asset_tag = models.CharField(max_length=64, null=True, blank=True, unique=True)
    warranty_end = models.DateField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=GpuState.choices, default=GpuState.RECEIVED)
    state_changed_at = models.DateTimeField(null=True, blank=True)

    # Placement. ``server`` NULL = not in a server (spares pool, in transit, RMA).
    server = models.ForeignKey(Server, null=True, blank=True, on_delete=models.PROTECT, related_name="gpus",
                               db_index=False)
    module_id = models.PositiveSmallIntegerField("Slot (module id)", null=True, blank=True)
    pci_bus_id = models.CharField("PCI bus id", max_length=20, blank=True)
    minor_number = models.PositiveSmallIntegerField(null=True, blank=True)
    site = models.ForeignKey(Site, null=True, blank=True, on_delete=models.PROTECT, editable=False,
                             related_name="gpus", db_index=False)
    row = models.ForeignKey(Row, null=True, blank=True, on_delete=models.PROTECT, editable=False,
                            related_name="gpus", db_index=False)
    rack = models.ForeignKey(Rack, null=True, blank=True, on_delete=models.PROTECT, editable=False,
                             related_name="gpus", db_index=False)

    # Current firmware, denormalised from the latest observations for filtering and list pages.
    vbios_version = models.CharField("VBIOS", max_length=40, blank=True)
    inforom_image = models.CharField("InfoROM image", max_length=40, blank=True)
    driver_version = models.CharField(max_length=40, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["server", "pci_bus_id"], name="gpu_unique_server_bus",
                                    condition=Q(server__isnull=False) & ~Q(pci_bus_id="")),
            models.CheckConstraint(condition=Q(server__isnull=False) | Q(pci_bus_id="", module_id__isnull=True),
                                   name="gpu_slot_needs_server"),
            models.CheckConstraint(condition=Q(state__in=GpuState.values), name="gpu_state_valid"),
        ]
        indexes = [
            models.Index(fields=["state", "id"], name="gpu_state_idx"),
            models.Index(fields=["site", "id"], name="gpu_site_idx"),
            models.Index(fields=["row", "id"], name="gpu_row_idx"),
            models.Index(fields=["rack", "id"], name="gpu_rack_idx"),
            models.Index(fields=["server", "module_id"], name="gpu_server_slot_idx"),
            models.Index(fields=["model", "id"], name="gpu_model_idx"),
            models.Index(fields=["vbios_version", "id"], name="gpu_vbios_idx"),
            models.Index(fields=["driver_version", "id"], name="gpu_driver_idx"),
            models.Index(fields=["identity_masked", "id"], name="gpu_masked_idx"),
            models.Index(fields=["id"], condition=Q(server__isnull=True), name="gpu_unplaced_idx"),
            # The free-text search's prefixes (LIKE 'x%'; the unique indexes serve equality only).
            models.Index(fields=["serial"], name="gpu_serial_prefix_idx", opclasses=["varchar_pattern_ops"]),
            models.Index(fields=["uuid"], name="gpu_uuid_prefix_idx", opclasses=["varchar_pattern_ops"]),
            models.Index(fields=["asset_tag"], name="gpu_asset_tag_prefix_idx", opclasses=["varchar_pattern_ops"]),
        ]

    def __str__(self) -> str:
        return self.serial or self.uuid or self.serial_raw or f"GPU #{self.pk}"

    @property
    def identity(self) -> str:
        """What an operator reads as this GPU's name."""
        return gpu_identity(serial=self.serial, uuid=self.uuid, pk=self.pk, pci_bus_id=self.pci_bus_id,
                            hostname=self.server.hostname if self.server_id else None)


def gpu_identity(*, serial: str | None, uuid: str | None, hostname: str | None, pci_bus_id: str, pk: int) -> str:
    """Serial, else UUID, else ``host:bus``, else the row id: the name operators read for a GPU."""
    if serial:
        return serial
    if uuid:
        return uuid
    if hostname and pci_bus_id:
        return f"{hostname}:{pci_bus_id}"
    return f"GPU #{pk}"


class FirmwareComponent(models.TextChoices):
    GPU_VBIOS = "gpu_vbios", "GPU VBIOS"
    GPU_INFOROM_IMAGE = "gpu_inforom_image", "GPU InfoROM image"
    GPU_INFOROM_OEM = "gpu_inforom_oem", "GPU InfoROM OEM object"
    GPU_INFOROM_ECC = "gpu_inforom_ecc", "GPU InfoROM ECC object"
    GPU_INFOROM_PWR = "gpu_inforom_pwr", "GPU InfoROM power object"
    GPU_GSP = "gpu_gsp", "GPU GSP firmware"
    DRIVER = "driver", "NVIDIA driver"
    HMC = "hmc", "HGX HMC"
    BMC = "bmc", "Host BMC"
    SBIOS = "sbios", "SBIOS"
    CPLD = "cpld", "CPLD"
    EROT = "erot", "ERoT"
    NVSWITCH = "nvswitch", "NVSwitch"
    NIC = "nic", "ConnectX NIC"
    DPU = "dpu", "BlueField DPU"
    PSU = "psu", "PSU"


class FirmwareObservation(models.Model):
    """A firmware version seen on a GPU or a server component, from a given source.

    One row per (device, component, version): a new row when the version changes,
    ``last_seen`` moves when it is seen again.
    """

    gpu = models.ForeignKey(Gpu, null=True, blank=True, on_delete=models.PROTECT, related_name="firmware")
    server = models.ForeignKey(Server, null=True, blank=True, on_delete=models.PROTECT, related_name="firmware")
    component = models.CharField(max_length=24, choices=FirmwareComponent.choices)
    version = models.CharField(max_length=80)
    source = models.CharField(max_length=24, help_text="nvidia-smi-xml, nvidia-smi-csv, csv, redfish, ...")
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ["component", "-last_seen", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(gpu__isnull=False) ^ Q(server__isnull=False),
                                   name="fwobs_one_device"),
            models.UniqueConstraint(fields=["gpu", "component", "version"], name="fwobs_unique_gpu",
                                    condition=Q(gpu__isnull=False)),
            models.UniqueConstraint(fields=["server", "component", "version"], name="fwobs_unique_server",
                                    condition=Q(server__isnull=False)),
        ]
        indexes = [
            models.Index(fields=["component", "version"], name="fwobs_comp_ver_idx"),
            # The latest observation per (server, component): compliance's DISTINCT ON reads it in index order.
            models.Index(fields=["server", "component", "-last_seen", "-id"], condition=Q(server__isnull=False),
                         name="fwobs_server_latest_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_component_display()} {self.version}"


class GpuStateChange(models.Model):
    """Lifecycle history: one row per transition, written by ``gpu_transition``."""

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="state_changes")
    from_state = models.CharField(max_length=16, choices=GpuState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=GpuState.choices)
    actor_name = models.CharField(max_length=150)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["gpu", "-at"], name="gpustate_gpu_idx")]

    def __str__(self) -> str:
        return f"{self.gpu_id}: {self.from_state or '-'} -> {self.to_state}"


class MoveKind(models.TextChoices):
    INSTALL = "install", "Installed"
    MOVE = "move", "Moved"
    REMOVE = "remove", "Removed"
    TO_SPARES = "to_spares", "Into spares pool"
    FROM_SPARES = "from_spares", "Out of spares pool"


class GpuMove(models.Model):
    """Placement history: every change of a GPU's server/slot, and in and out of the spares pool."""

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="moves")
    kind = models.CharField(max_length=12, choices=MoveKind.choices)
    from_server = models.ForeignKey(Server, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    from_pci_bus_id = models.CharField(max_length=20, blank=True)
    from_module_id = models.PositiveSmallIntegerField(null=True, blank=True)
    to_server = models.ForeignKey(Server, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    to_pci_bus_id = models.CharField(max_length=20, blank=True)
    to_module_id = models.PositiveSmallIntegerField(null=True, blank=True)
    actor_name = models.CharField(max_length=150)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["gpu", "-at"], name="gpumove_gpu_idx")]

    def __str__(self) -> str:
        return f"{self.gpu_id} {self.kind}"
