"""Uploaded import files between their preview and their confirmation."""

from __future__ import annotations

from django.db import models


class ImportRun(models.Model):
    """An uploaded file waiting for confirmation (preview), then applied."""

    class Status(models.TextChoices):
        PREVIEW = "preview"
        APPLIED = "applied"
        FAILED = "failed"

    filename = models.CharField(max_length=255)
    fmt = models.CharField("format", max_length=20)
    server_hint = models.CharField(max_length=253, blank=True)
    content = models.BinaryField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PREVIEW)
    summary = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey("auth.User", null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"import #{self.pk} {self.filename}"
