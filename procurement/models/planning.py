"""Spares pools, lead times, stored forecasts (with their inputs), and the inputs of refresh planning."""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models import Q

from inventory.models import GpuModel, Site
from procurement.models.orders import Vendor


class SparesPool(models.Model):
    """A named group of sites that share spare stock."""

    name = models.CharField(max_length=60, unique=True)
    sites = models.ManyToManyField(Site, related_name="spares_pools")
    target_fill_rate = models.DecimalField(max_digits=4, decimal_places=3, default=Decimal("0.950"),
                                           help_text="Share of failures to be met from stock (0.5-0.999)")

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.CheckConstraint(condition=Q(target_fill_rate__gte=Decimal("0.5"))
                                              & Q(target_fill_rate__lte=Decimal("0.999")), name="pool_target_range")]

    def __str__(self) -> str:
        return self.name


class LeadTime(models.Model):
    """Configured replenishment lead time for a model (from one vendor, or any vendor when empty)."""

    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    vendor = models.ForeignKey(Vendor, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    days = models.PositiveIntegerField()

    class Meta:
        ordering = ["gpu_model", "vendor", "id"]
        constraints = [models.UniqueConstraint(fields=["gpu_model", "vendor"], name="leadtime_unique",
                                               nulls_distinct=False),
                       models.CheckConstraint(condition=Q(days__gt=0), name="leadtime_positive")]

    def __str__(self) -> str:
        return f"{self.gpu_model} {self.days} d"


class ForecastRun(models.Model):
    """One computation of every scope's forecast, as of a date, with the parameters it used."""

    as_of = models.DateField()
    method = models.CharField(max_length=20, default="adaptive")
    params = models.JSONField(default=dict)
    actor_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    duration_s = models.FloatField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["as_of", "id"], name="fcrun_asof_idx")]

    def __str__(self) -> str:
        return f"forecast as of {self.as_of} (#{self.pk})"


class ScopeKind(models.TextChoices):
    SITE = "site", "Site"
    POOL = "pool", "Spares pool"
    MODEL = "model", "Fleet (model)"


class Forecast(models.Model):
    """The forecast of one scope (a site and model, a pool and model, or a model fleet-wide) in one run."""

    run = models.ForeignKey(ForecastRun, on_delete=models.CASCADE, related_name="forecasts")
    scope = models.CharField(max_length=6, choices=ScopeKind.choices)
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    site = models.ForeignKey(Site, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(SparesPool, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    installed = models.PositiveIntegerField()
    failures = models.PositiveIntegerField(help_text="Failures in the history window")
    exposure_years = models.FloatField()
    rate = models.FloatField(help_text="Failures per GPU-year the forecast uses")
    rate_lo = models.FloatField(help_text="90 % interval of the window's rate, low")
    rate_hi = models.FloatField(help_text="90 % interval of the window's rate, high")
    vmr = models.FloatField(help_text="Variance-to-mean ratio of monthly failure counts")
    lead_days = models.PositiveIntegerField()
    lead_source = models.CharField(max_length=20, help_text="configured, observed, rma or default")
    demand_mean = models.FloatField()
    demand_p05 = models.PositiveIntegerField()
    demand_p95 = models.PositiveIntegerField()
    target_fill_rate = models.FloatField()
    recommended = models.PositiveIntegerField()
    fill_rate = models.FloatField(help_text="Expected share of demand met by the recommended stock")
    service_level = models.FloatField(help_text="Chance of no stock-out over the lead time")
    spares = models.PositiveIntegerField(help_text="GPUs in spare at the scope's sites")
    spares_fill_rate = models.FloatField(help_text="Expected fill rate of the current spares")
    shortfall = models.PositiveIntegerField()
    reorder = models.PositiveIntegerField(help_text="Suggested order: shortfall net of open orders")
    on_order = models.PositiveIntegerField(default=0)
    beta = models.FloatField(null=True, blank=True, help_text="Crow-AMSAA beta (> 1: rate rising)")
    alert = models.CharField(max_length=500, blank=True)
    inputs = models.JSONField(default=dict, help_text="Monthly counts and exposure the forecast read")

    class Meta:
        ordering = ["run", "gpu_model", "scope", "site", "pool", "id"]
        indexes = [models.Index(fields=["run", "scope", "id"], name="forecast_run_scope_idx")]

    def __str__(self) -> str:
        where = self.site or self.pool or "fleet"
        return f"{self.gpu_model} @ {where}: {self.recommended}"


class ModelEconomics(models.Model):
    """Per-model inputs of cost per GPU-year (price comes from order lines when not set here)."""

    gpu_model = models.OneToOneField(GpuModel, on_delete=models.PROTECT, related_name="economics")
    purchase_price = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True,
                                         help_text="Empty: the mean unit price of its order lines")
    all_in_factor = models.DecimalField(max_digits=4, decimal_places=2, default=Decimal("1.50"),
                                        help_text="Server, network and install per GPU, as a multiple of its price")
    measured_power_w = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: TDP")
    load_factor = models.DecimalField(max_digits=3, decimal_places=2, default=Decimal("0.75"))
    maintenance_share = models.DecimalField(max_digits=4, decimal_places=3, default=Decimal("0.050"),
                                            help_text="Yearly support cost as a share of the all-in price")
    depreciation_years = models.PositiveSmallIntegerField(default=5)
    relative_performance = models.DecimalField(max_digits=6, decimal_places=2, default=Decimal("1.00"))
    performance_note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["gpu_model", "id"]
        verbose_name_plural = "model economics"
        constraints = [models.CheckConstraint(condition=Q(depreciation_years__gt=0), name="econ_years_positive")]

    def __str__(self) -> str:
        return f"economics of {self.gpu_model}"


class DemandPoint(models.Model):
    """Planners' demand curve: GPUs needed by a month."""

    month = models.DateField(unique=True)
    gpus = models.PositiveIntegerField()
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["month", "id"]

    def __str__(self) -> str:
        return f"{self.month}: {self.gpus}"
