"""Where things are: Site > Hall > Row > Rack, power feeds and NVLink domains (the failure domains the rollout
planner groups by, with the server)."""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models import Q


class Cooling(models.TextChoices):
    AIR = "air", "Air"
    LIQUID = "liquid", "Liquid"


class Site(models.Model):
    code = models.SlugField(max_length=20, unique=True)
    name = models.CharField(max_length=100)
    timezone = models.CharField(max_length=64, default="UTC")
    electricity_price_kwh = models.DecimalField(max_digits=8, decimal_places=4, default=0,
                                                help_text="Price per kWh in the site's currency")
    pue = models.DecimalField("PUE", max_digits=4, decimal_places=2, default=Decimal("1.30"))

    class Meta:
        ordering = ["code"]
        constraints = [models.CheckConstraint(condition=Q(pue__gte=1), name="site_pue_gte_1")]

    def __str__(self) -> str:
        return self.code


class Hall(models.Model):
    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="halls")
    name = models.CharField(max_length=50)

    class Meta:
        ordering = ["site__code", "name"]
        constraints = [models.UniqueConstraint(fields=["site", "name"], name="hall_unique_name")]

    def __str__(self) -> str:
        return f"{self.site.code}/{self.name}"


class Row(models.Model):
    hall = models.ForeignKey(Hall, on_delete=models.PROTECT, related_name="rows")
    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="rows", editable=False)
    name = models.CharField(max_length=50)

    class Meta:
        ordering = ["site__code", "name", "id"]
        constraints = [models.UniqueConstraint(fields=["hall", "name"], name="row_unique_name")]

    def __str__(self) -> str:
        return f"{self.site.code}/{self.name}"

    def save(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.site_id = self.hall.site_id  # denormalised: a row never leaves its hall's site
        super().save(*args, **kwargs)


class PowerFeed(models.Model):
    """A power distribution path (for example PDU-A of a row): a failure domain."""

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="power_feeds")
    name = models.CharField(max_length=50)
    capacity_kw = models.DecimalField(max_digits=8, decimal_places=2, null=True, blank=True)

    class Meta:
        ordering = ["site__code", "name"]
        constraints = [models.UniqueConstraint(fields=["site", "name"], name="powerfeed_unique_name")]

    def __str__(self) -> str:
        return f"{self.site.code}/{self.name}"


class Rack(models.Model):
    row = models.ForeignKey(Row, on_delete=models.PROTECT, related_name="racks")
    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="racks", editable=False)
    name = models.CharField(max_length=50)
    position = models.PositiveIntegerField(help_text="Position of the rack in its row")
    height_u = models.PositiveSmallIntegerField(default=48)
    cooling = models.CharField(max_length=10, choices=Cooling.choices, default=Cooling.AIR)
    power_budget_kw = models.DecimalField(max_digits=7, decimal_places=2, default=0)
    power_feeds = models.ManyToManyField(PowerFeed, related_name="racks", blank=True)

    class Meta:
        ordering = ["site__code", "name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["site", "name"], name="rack_unique_name"),
            models.UniqueConstraint(fields=["row", "position"], name="rack_unique_position"),
        ]
        indexes = [models.Index(fields=["row", "position"], name="rack_row_pos_idx")]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.site_id = self.row.site_id
        super().save(*args, **kwargs)


class NvlinkDomain(models.Model):
    """GPUs joined by NVLink/NVSwitch (an HGX baseboard, or a whole NVL72 rack): updated as one unit."""

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="nvlink_domains")
    name = models.CharField(max_length=80)

    class Meta:
        ordering = ["site__code", "name"]
        constraints = [models.UniqueConstraint(fields=["site", "name"], name="nvlink_unique_name")]

    def __str__(self) -> str:
        return self.name
