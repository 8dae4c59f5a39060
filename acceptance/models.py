"""Acceptance evidence: diagnostic runs (``dcgmi diag -j``) with their per-GPU, per-test results, plain acceptance
checks (NCCL all-reduce, nvbandwidth, HPL) with thresholds per model, and the burn-in policy per GPU model."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from inventory.models import Gpu, GpuModel, Server


class TestStatus(models.TextChoices):
    PASS = "pass", "Pass"
    FAIL = "fail", "Fail"
    WARN = "warn", "Warn"
    SKIP = "skip", "Skip"
    NOT_RUN = "not_run", "Not run"


class Verdict(models.TextChoices):
    PASS = "pass", "Pass"
    FAIL = "fail", "Fail"
    INCOMPLETE = "incomplete", "Incomplete"  # a requested test did not run, or the run ended in a runtime error


class DiagnosticRun(models.Model):
    """One ``dcgmi diag`` run on one host, kept with its document verbatim (unknown tests and fields included)."""

    server = models.ForeignKey(Server, null=True, blank=True, on_delete=models.PROTECT, related_name="diag_runs")
    level = models.PositiveSmallIntegerField(help_text="dcgmi diag -r level (1-4)")
    level_inferred = models.BooleanField(default=False, help_text="Not given by the uploader: read from the tests")
    dcgm_version = models.CharField(max_length=40, blank=True)
    dcgm_major = models.PositiveSmallIntegerField(null=True, blank=True)
    driver_version = models.CharField(max_length=40, blank=True)
    runtime_error = models.TextField(blank=True)
    ran_at = models.DateTimeField(help_text="When the run ended (the upload time when not given)")
    source = models.CharField(max_length=16, default="api", help_text="api, upload, command, scheduler, demo")
    document = models.JSONField(help_text="The document as received")
    actor_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ran_at", "-id"]
        indexes = [models.Index(fields=["server", "-ran_at"], name="diagrun_server_idx")]

    def __str__(self) -> str:
        return f"diag run #{self.pk} (level {self.level})"


class RunGpu(models.Model):
    """One GPU's verdict in a run, and how the run's entity was placed on it."""

    run = models.ForeignKey(DiagnosticRun, on_delete=models.CASCADE, related_name="gpus")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="diag_verdicts")
    entity_id = models.PositiveIntegerField()
    placed_by = models.CharField(max_length=20, help_text="serial, pci_bus_id, host_index")
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    reasons = models.JSONField(default=list)

    class Meta:
        ordering = ["run", "entity_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "gpu"], name="rungpu_unique"),
            models.CheckConstraint(condition=Q(verdict__in=Verdict.values), name="rungpu_verdict_valid"),
        ]
        indexes = [models.Index(fields=["gpu", "-id"], name="rungpu_gpu_idx")]

    def __str__(self) -> str:
        return f"run {self.run_id} gpu {self.gpu_id}: {self.verdict}"


class DiagnosticResult(models.Model):
    """One test's result for one GPU in a run. ``raw`` keeps the result object (and unknown fields) verbatim."""

    run = models.ForeignKey(DiagnosticRun, on_delete=models.CASCADE, related_name="results")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="diag_results")
    category = models.CharField(max_length=60, blank=True)
    test = models.CharField(max_length=100)
    status = models.CharField(max_length=8, choices=TestStatus.choices)
    status_raw = models.CharField(max_length=40, blank=True)
    error_ids = models.JSONField(default=list)
    messages = models.JSONField(default=list)
    raw = models.JSONField(default=dict)

    class Meta:
        ordering = ["run", "gpu", "id"]
        constraints = [models.CheckConstraint(condition=Q(status__in=TestStatus.values), name="diagresult_status_valid")]
        indexes = [models.Index(fields=["gpu", "run"], name="diagresult_gpu_idx")]

    def __str__(self) -> str:
        return f"{self.test}: {self.status}"


class CheckThreshold(models.Model):
    """A site acceptance check's threshold for one GPU model: a measured value must be >= min and <= max."""

    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=60, help_text="nccl_allreduce_busbw, nvbandwidth_d2d, hpl_tflops, ...")
    min_value = models.FloatField(null=True, blank=True)
    max_value = models.FloatField(null=True, blank=True)
    unit = models.CharField(max_length=20, blank=True)

    class Meta:
        ordering = ["gpu_model", "name"]
        constraints = [models.UniqueConstraint(fields=["gpu_model", "name"], name="checkthreshold_unique")]

    def __str__(self) -> str:
        return f"{self.gpu_model} {self.name}"


class AcceptanceCheck(models.Model):
    """A site test's result for one GPU: pass/fail as given, or a measured value judged against the threshold of
    the GPU's model (the threshold used is kept with the result)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="acceptance_checks")
    name = models.CharField(max_length=60)
    passed = models.BooleanField()
    value = models.FloatField(null=True, blank=True)
    unit = models.CharField(max_length=20, blank=True)
    threshold = models.JSONField(default=dict, blank=True)
    details = models.TextField(blank=True)
    measured_at = models.DateTimeField()
    actor_name = models.CharField(max_length=150)

    class Meta:
        ordering = ["-measured_at", "-id"]
        indexes = [models.Index(fields=["gpu", "name", "-measured_at"], name="acccheck_gpu_idx")]

    def __str__(self) -> str:
        return f"{self.name} {'pass' if self.passed else 'fail'}"


class BurnInPolicy(models.Model):
    """What a GPU model must show before it enters service. ``gpu_model`` empty: the fleet default."""

    gpu_model = models.OneToOneField(GpuModel, null=True, blank=True, on_delete=models.PROTECT,
                                     related_name="burn_in_policy")
    min_level = models.PositiveSmallIntegerField(default=3, help_text="Lowest dcgmi diag level that counts")
    required_runs = models.PositiveSmallIntegerField(default=2, help_text="Passing runs needed")
    min_hours = models.FloatField(default=24, help_text="Hours between the first and last passing run")
    required_tests = models.JSONField(default=list, blank=True,
                                      help_text="Test names that must pass in each counted run (any spelling)")
    required_checks = models.JSONField(default=list, blank=True, help_text="Acceptance check names that must pass")
    return_min_level = models.PositiveSmallIntegerField(default=3, help_text="Level for a drained GPU's return")
    return_runs = models.PositiveSmallIntegerField(default=1)
    infant_days = models.PositiveSmallIntegerField(default=90, help_text="Early-failure window after service")

    class Meta:
        ordering = ["gpu_model__name", "id"]
        verbose_name_plural = "burn-in policies"
        constraints = [
            models.CheckConstraint(condition=Q(min_level__gte=1, min_level__lte=4), name="burninpolicy_level"),
            models.CheckConstraint(condition=Q(required_runs__gte=1), name="burninpolicy_runs"),
        ]

    def __str__(self) -> str:
        return f"burn-in policy for {self.gpu_model or 'the fleet'}"
