"""Telemetry data: latest values, rollups, XID events, ingest sources, health flags.

The two raw tables, ``telemetry_sample`` (one row per GPU per scrape, 8 narrow columns) and
``telemetry_counter`` (one row only when a GPU's error counters change), have no Django model: they are
daily range partitions on PostgreSQL written with COPY and read with SQL in
:mod:`telemetry.selectors`. The migration creates them (``telemetry.partitions``).
Design and sizes: ``docs/telemetry.md``.

Imported at the bottom of ``inventory/models.py``, so these are models of the ``inventory`` app.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

# Application-caused XIDs (NVIDIA's XID catalogue: 13 graphics engine exception, 31 MMU fault, 43 GPU
# stopped processing, 45 preemptive cleanup): stored, never counted against the hardware.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})


def xid_is_hardware(xid: int) -> bool:
    return xid not in APPLICATION_XIDS


class XidSource(models.TextChoices):
    DCGM = "dcgm", "dcgm-exporter"
    KERNEL = "kernel", "Kernel log"
    NVIDIA_SMI = "nvidia-smi", "nvidia-smi"


class GpuLatest(models.Model):
    """The last sample of every GPU ("current" columns, the live heatmap), rewritten by every ingest batch.

    ``fillfactor=70`` (set in the migration) leaves room on each page, so the per-batch UPDATE is a HOT
    update that never touches the primary-key index.
    """

    gpu = models.OneToOneField("inventory.Gpu", primary_key=True, on_delete=models.CASCADE, related_name="latest")
    ts = models.DateTimeField()
    gpu_temp_c = models.SmallIntegerField(null=True)
    mem_temp_c = models.SmallIntegerField(null=True)
    tlimit_c = models.SmallIntegerField("T.Limit headroom (C)", null=True)
    power_w = models.FloatField(null=True)
    sm_clock_mhz = models.SmallIntegerField(null=True)
    throttle_mask = models.IntegerField(null=True)
    ecc_sbe = models.BigIntegerField(null=True)
    ecc_dbe = models.BigIntegerField(null=True)
    remap_corr = models.IntegerField(null=True)
    remap_unc = models.IntegerField(null=True)
    remap_failure = models.BooleanField(null=True)
    pcie_replay = models.BigIntegerField(null=True)
    sram_threshold = models.BooleanField(null=True)
    last_xid = models.IntegerField(null=True, help_text="Last value of the DCGM XID gauge (0: none)")
    last_xid_at = models.DateTimeField(null=True)

    class Meta:
        db_table = "telemetry_gpulatest"
        verbose_name = "latest GPU sample"

    def __str__(self) -> str:
        return f"GPU #{self.gpu_id} at {self.ts:%Y-%m-%d %H:%M:%S}"


class RollupColumns(models.Model):
    """Per-GPU aggregates of one bucket (5 minutes or 1 hour)."""

    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    bucket = models.DateTimeField()
    n_samples = models.IntegerField()
    gpu_temp_min = models.FloatField(null=True)
    gpu_temp_avg = models.FloatField(null=True)
    gpu_temp_max = models.FloatField(null=True)
    mem_temp_max = models.FloatField(null=True)
    tlimit_min = models.FloatField(null=True)
    power_min = models.FloatField(null=True)
    power_avg = models.FloatField(null=True)
    power_max = models.FloatField(null=True)
    sm_clock_avg = models.FloatField(null=True)
    throttled_samples = models.IntegerField(default=0, help_text="Samples with a hardware throttle reason")
    throttle_s = models.FloatField(default=0, help_text="Throttled fraction x bucket seconds")
    d_ecc_sbe = models.BigIntegerField(default=0)
    d_ecc_dbe = models.BigIntegerField(default=0)
    d_remap_corr = models.IntegerField(default=0)
    d_remap_unc = models.IntegerField(default=0)
    d_pcie_replay = models.BigIntegerField(default=0)
    hw_xid_count = models.IntegerField(default=0)

    class Meta:
        abstract = True


class Rollup5m(RollupColumns):
    """5-minute rollups: daily partitions on ``bucket`` (PostgreSQL), dropped after FLEET_TELEMETRY_5M_DAYS."""

    pk = models.CompositePrimaryKey("gpu", "bucket")

    class Meta:
        managed = False  # partitioned table: created by the migration
        db_table = "telemetry_rollup5m"

    def __str__(self) -> str:
        return f"GPU #{self.gpu_id} {self.bucket:%Y-%m-%d %H:%M}"


class Rollup1h(RollupColumns):
    """1-hour rollups, kept for the life of the GPU."""

    pk = models.CompositePrimaryKey("gpu", "bucket")

    class Meta:
        db_table = "telemetry_rollup1h"

    def __str__(self) -> str:
        return f"GPU #{self.gpu_id} {self.bucket:%Y-%m-%d %H:%M}"


class GroupLevel(models.TextChoices):
    SITE = "site", "Site"
    ROW = "row", "Row"
    RACK = "rack", "Rack"


class RollupGroupColumns(models.Model):
    """Aggregates over the GPUs of one rack, row or site, from the per-GPU rollups of the same bucket."""

    level = models.CharField(max_length=4, choices=GroupLevel.choices)
    group_id = models.BigIntegerField()
    bucket = models.DateTimeField()
    n_gpus = models.IntegerField()
    gpu_temp_min = models.FloatField(null=True)
    gpu_temp_avg = models.FloatField(null=True)
    gpu_temp_max = models.FloatField(null=True)
    mem_temp_max = models.FloatField(null=True)
    tlimit_min = models.FloatField(null=True)
    power_min = models.FloatField(null=True)
    power_avg = models.FloatField(null=True)
    power_max = models.FloatField(null=True)
    power_sum = models.FloatField(null=True, help_text="Sum of the GPUs' mean power: the group's draw")
    sm_clock_avg = models.FloatField(null=True)
    throttled_gpus = models.IntegerField(default=0)
    throttle_s = models.FloatField(default=0)
    hw_xid_count = models.IntegerField(default=0)

    class Meta:
        abstract = True


class RollupGroup5m(RollupGroupColumns):
    pk = models.CompositePrimaryKey("level", "group_id", "bucket")

    class Meta:
        managed = False  # partitioned table: created by the migration
        db_table = "telemetry_rollupgroup5m"

    def __str__(self) -> str:
        return f"{self.level} #{self.group_id} {self.bucket:%Y-%m-%d %H:%M}"


class RollupGroup1h(RollupGroupColumns):
    pk = models.CompositePrimaryKey("level", "group_id", "bucket")

    class Meta:
        db_table = "telemetry_rollupgroup1h"

    def __str__(self) -> str:
        return f"{self.level} #{self.group_id} {self.bucket:%Y-%m-%d %H:%M}"


class RollupCursor(models.Model):
    """Watermark of the incremental rollup: every bucket before ``done_until`` is rolled up."""

    resolution = models.CharField(max_length=4, primary_key=True)
    done_until = models.DateTimeField()

    class Meta:
        db_table = "telemetry_rollupcursor"

    def __str__(self) -> str:
        return f"{self.resolution} until {self.done_until}"


def validate_exporter_url(value: str) -> None:
    """http(s)://host[:port]/path, where host may be a bare hostname (URLField wants a dotted domain)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("Enter an http:// or https:// URL with a host, e.g. http://node0001:9400/metrics.")


class IngestKind(models.TextChoices):
    SCRAPE = "scrape", "Scrape (Fleet fetches the URL)"
    PUSH = "push", "Push (POST to the API)"
    FILE = "file", "File (command line)"


class IngestSource(models.Model):
    """Where telemetry comes from, and how its last ingests went (the ingest status page)."""

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=8, choices=IngestKind.choices, default=IngestKind.SCRAPE)
    url = models.CharField("URL", max_length=500, blank=True, validators=[validate_exporter_url],
                           help_text="dcgm-exporter /metrics URL (scrape sources), e.g. http://node0001:9400/metrics")
    host = models.CharField(max_length=253, blank=True,
                            help_text="Hostname for samples without a Hostname label or UUID")
    enabled = models.BooleanField(default=True)
    interval_s = models.PositiveIntegerField("interval (s)", default=30)
    timeout_s = models.FloatField("timeout (s)", default=10)
    scrape_in_flight_until = models.DateTimeField(null=True, blank=True, editable=False,
                                                  help_text="Claimed by a scrape task until then")
    last_attempt_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_ok_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.CharField(max_length=1000, blank=True, editable=False)
    last_duration_ms = models.IntegerField(null=True, blank=True, editable=False)
    last_samples = models.IntegerField(default=0, editable=False)
    last_unknown = models.IntegerField(default=0, editable=False)
    last_rejected = models.JSONField(default=dict, blank=True, editable=False)
    samples_total = models.BigIntegerField(default=0, editable=False)
    unknown_total = models.BigIntegerField(default=0, editable=False)
    rejected_total = models.JSONField(default=dict, blank=True, editable=False)
    unknown_examples = models.JSONField(default=list, blank=True, editable=False,
                                        help_text="The last unknown identities (at most 20)")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "telemetry_ingestsource"
        ordering = ["name", "id"]
        indexes = [models.Index(fields=["kind", "enabled", "last_attempt_at"], name="tel_source_due_idx")]

    def __str__(self) -> str:
        return self.name


class XidEvent(models.Model):
    """One XID: a change of the DCGM gauge, or a kernel-log ``NVRM: Xid`` line."""

    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="xid_events")
    at = models.DateTimeField()
    xid = models.PositiveIntegerField("XID")
    hardware = models.BooleanField(help_text="False for application-caused XIDs (13, 31, 43, 45)")
    pid = models.IntegerField(null=True, blank=True)
    process = models.CharField(max_length=200, blank=True)
    message = models.CharField(max_length=1000, blank=True)
    source = models.CharField(max_length=12, choices=XidSource.choices)
    ingest_source = models.ForeignKey(IngestSource, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="xid_events")
    line_key = models.CharField(max_length=64, null=True, blank=True, unique=True, editable=False,
                                help_text="Hash of a kernel-log line: the same log ingested twice adds nothing")

    class Meta:
        db_table = "telemetry_xidevent"
        verbose_name = "XID event"
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["gpu", "-at"], name="tel_xid_gpu_idx"),
            models.Index(fields=["at"], name="tel_xid_at_idx"),
        ]

    def __str__(self) -> str:
        return f"XID {self.xid} on GPU #{self.gpu_id}"


class HealthKind(models.TextChoices):
    ROW_REMAP_FAILURE = "row_remap_failure", "Row-remap failure"
    RMA_XID = "rma_xid", "RMA XID"
    SRAM_THRESHOLD = "sram_threshold", "SRAM threshold exceeded"
    ERROR_RATE = "error_rate", "Error rate above peers"
    THERMAL_OUTLIER = "thermal_outlier", "Thermal outlier"


class HealthSeverity(models.TextChoices):
    RMA = "rma", "RMA"
    DRAIN = "drain", "Drain"
    WATCH = "watch", "Watch"


class HealthFlag(models.Model):
    """A reason to drain or return a GPU; computed by ``telemetry.health``. Open while ``cleared_at`` is null."""

    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="health_flags")
    kind = models.CharField(max_length=20, choices=HealthKind.choices)
    severity = models.CharField(max_length=8, choices=HealthSeverity.choices)
    evidence = models.JSONField(default=dict, blank=True)
    raised_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "telemetry_healthflag"
        ordering = ["-raised_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "kind"], condition=Q(cleared_at__isnull=True),
                                    name="tel_health_one_open"),
            models.CheckConstraint(condition=Q(kind__in=HealthKind.values), name="tel_health_kind_valid"),
            models.CheckConstraint(condition=Q(severity__in=HealthSeverity.values), name="tel_health_severity_valid"),
        ]
        indexes = [
            models.Index(fields=["severity", "id"], condition=Q(cleared_at__isnull=True), name="tel_health_open_idx"),
            # The Health page's kind filter over open flags. Its site and model filters go through the GPU
            # (gpu_site_idx, gpu_model_idx) and back by tel_health_one_open, whose first column is gpu.
            models.Index(fields=["kind", "id"], condition=Q(cleared_at__isnull=True), name="tel_health_open_kind_idx"),
            models.Index(fields=["gpu", "-raised_at"], name="tel_health_gpu_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on GPU #{self.gpu_id}"


class SampleDay(models.Model):
    """One GPU's raw samples of one UTC day, compacted (``telemetry.compact``): the raw rows are dropped.

    ``data`` is the codec's blob (a version byte first); ``STORAGE EXTERNAL`` on PostgreSQL (set by the migration):
    TOAST stores it out of line without a second, useless compression attempt.
    """

    pk = models.CompositePrimaryKey("gpu", "day")
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    day = models.DateField()
    n = models.IntegerField(help_text="Samples in the blob")
    data = models.BinaryField()

    class Meta:
        db_table = "telemetry_sampleday"

    def __str__(self) -> str:
        return f"GPU #{self.gpu_id} {self.day}"
