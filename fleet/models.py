"""Cross-cutting records every app uses: the audit trail and background jobs."""

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models


class AuditSource(models.TextChoices):
    UI = "ui", "Web UI"
    API = "api", "REST API"
    ADMIN = "admin", "Django admin"
    CLI = "cli", "Management command"
    WORKER = "worker", "Celery worker"
    SYSTEM = "system", "System"


class AuditAction(models.TextChoices):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    TRANSITION = "transition"
    MOVE = "move"
    IMPORT = "import"
    LOCKOUT = "lockout"
    REVOKE = "revoke"


class AuditEvent(models.Model):
    """One change to one object: who, from where, what changed (before and after), when.

    Written by the service that made the change, in the same transaction.
    """

    at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150)
    source = models.CharField(max_length=10, choices=AuditSource.choices)
    action = models.CharField(max_length=12, choices=AuditAction.choices)
    content_type = models.ForeignKey(ContentType, on_delete=models.PROTECT)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    changes = models.JSONField(default=dict, blank=True)
    message = models.CharField(max_length=500, blank=True)
    request_id = models.CharField(max_length=64, blank=True, default="", db_default="",
                                  help_text="X-Request-ID of the request that made it")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["content_type", "object_id", "-at"], name="audit_object_idx"),
            models.Index(fields=["actor_name", "-at"], name="audit_actor_idx"),
            models.Index(fields=["action", "-id"], name="audit_action_idx"),
            models.Index(fields=["source", "-id"], name="audit_source_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.object_repr}"


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Job(models.Model):
    """A background job (bulk transition, large import) with progress counters for the UI."""

    kind = models.CharField(max_length=40)
    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    params = models.JSONField(default=dict, blank=True)
    errors = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, help_text="Last progress: a stalled job is resumed from here")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "updated_at"], name="job_status_updated_idx")]
        constraints = [
            models.CheckConstraint(condition=models.Q(done__lte=models.F("total")), name="job_done_lte_total"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.status})"

    @property
    def percent(self) -> int:
        return 100 if not self.total else int(100 * self.done / self.total)

    @property
    def finished(self) -> bool:
        return self.status in {JobStatus.SUCCEEDED, JobStatus.FAILED}


class JobChunk(models.Model):
    """One message's worth of a job's work (ids), done at most once: the state lives here, not in the broker."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    ids = models.JSONField()
    done = models.BooleanField(default=False)

    class Meta:
        ordering = ["job", "index"]
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="jobchunk_unique_index")]

    def __str__(self) -> str:
        return f"{self.job} chunk {self.index}"


class TokenScope(models.TextChoices):
    FULL = "full", "Full (what the user's role allows)"
    READ = "read", "Read-only"
    PUSH = "push", "Telemetry push only"


class ApiToken(models.Model):
    """An API token a user issued for a script, dashboard or exporter: scoped, expiring, revocable.

    Only a SHA-256 of the key is stored; the key is shown once, when it is created. Sent as DRF's
    ``Authorization: Token <key>`` (``fleet.tokens.ScopedTokenAuthentication``).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8, help_text="First characters of the key, to recognise it")
    scope = models.CharField(max_length=8, choices=TokenScope.choices, default=TokenScope.FULL)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["user", "-id"], name="apitoken_user_idx")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {self.scope})"
