"""Fleet settings. Everything that differs between machines comes from the environment.

Without DATABASE_URL / REDIS_URL Fleet runs on an embedded default: SQLite and kombu's
filesystem broker, both under ``var/``.
"""

import json
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from firmware.schedule import BEAT_SCHEDULE as FIRMWARE_BEAT_SCHEDULE
from fleet.logs import logging_config
from telemetry.schedule import BEAT_SCHEDULE as TELEMETRY_BEAT_SCHEDULE

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("FLEET_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _secret_key() -> str:
    """SECRET_KEY from the environment, else a random key kept in var/ (never in the repo)."""
    if key := os.environ.get("SECRET_KEY"):
        return key
    path = VAR_DIR / "secret_key"
    if not path.exists():
        import secrets

        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "fleet",
    "inventory",
    "telemetry",
    "firmware",
    "procurement",
    "decommission",
    "acceptance",
]

MIDDLEWARE = [
    "fleet.observability.RequestMiddleware",  # first: the request id and metrics cover every response
    "fleet.api_errors.UriLengthMiddleware",  # an over-long URL: a 414 (JSON under /api/) before any work
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "fleet.middleware.AuditContextMiddleware",
]

ROOT_URLCONF = "fleet.urls"
WSGI_APPLICATION = "fleet.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "fleet.roles.roles_context",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'fleet.sqlite3'}"),
        conn_max_age=int(os.environ.get("CONN_MAX_AGE", "60")),
    )
}
IS_POSTGRES = DATABASES["default"]["ENGINE"].endswith("postgresql")
if IS_POSTGRES:
    # The database lives on SSD or in RAM: at the default random_page_cost of 4 the planner walks the
    # primary key through ~80k rows instead of using the (site_id, id) index (bench/README.md).
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("options", "-c random_page_cost=1.1")
else:
    # Web and worker processes write at once: IMMEDIATE takes the write lock at BEGIN, so a second
    # writer waits (up to the timeout) instead of failing with "database is locked" on upgrade.
    DATABASES["default"].setdefault("OPTIONS", {}).update(timeout=30, transaction_mode="IMMEDIATE")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
# Uploaded files (firmware images): under var/ unless given.
MEDIA_URL = "/media/"
MEDIA_ROOT = Path(os.environ.get("FLEET_MEDIA_ROOT", VAR_DIR / "media"))
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# --- Fleet ---------------------------------------------------------------------------------------
# Largest file an import accepts, in bytes.
FLEET_IMPORT_MAX_BYTES = int(os.environ.get("FLEET_IMPORT_MAX_BYTES", str(64 * 1024 * 1024)))
# Bulk transitions above this many GPUs run as a background job with a progress bar.
FLEET_BULK_SYNC_LIMIT = int(os.environ.get("FLEET_BULK_SYNC_LIMIT", "200"))
# GPU ids per Celery message for bulk jobs (one message per GPU would cost minutes of broker overhead).
FLEET_BULK_CHUNK = int(os.environ.get("FLEET_BULK_CHUNK", "500"))
# An unfinished job without progress for this long has its unfinished chunks sent again (beat, every minute).
FLEET_JOB_STALL_SECONDS = int(os.environ.get("FLEET_JOB_STALL_SECONDS", "300"))
# Audit events older than this many days are deleted by a beat task (0 keeps them forever).
FLEET_AUDIT_RETENTION_DAYS = int(os.environ.get("FLEET_AUDIT_RETENTION_DAYS", "730"))
FLEET_PAGE_SIZE = 50
# The demo's BMC simulator (Procfile ``bmcsim``): the demo rollout's servers get BMCs there.
FLEET_DEMO_BMC_URL = os.environ.get("FLEET_DEMO_BMC_URL", "http://127.0.0.1:8100")

# --- Firmware --- (rollout engine and Redfish driver; docs/firmware.md)
# Credentials the Redfish driver logs in to BMCs with (Basic auth), and its per-request timeout in seconds.
FLEET_BMC_USERNAME = os.environ.get("FLEET_BMC_USERNAME", "")
FLEET_BMC_PASSWORD = os.environ.get("FLEET_BMC_PASSWORD", "")
FLEET_BMC_TIMEOUT = float(os.environ.get("FLEET_BMC_TIMEOUT", "5"))
# Beat period of the rollout tick (firmware/schedule.py reads the same variable).
FLEET_ROLLOUT_TICK_SECONDS = float(os.environ.get("FLEET_ROLLOUT_TICK_SECONDS", "5"))
# A dispatched step not finished after this long (its worker died) is dispatched again.
FLEET_ROLLOUT_LEASE_SECONDS = int(os.environ.get("FLEET_ROLLOUT_LEASE_SECONDS", "30"))
# Target ids per Celery message, and targets dispatched per tick.
FLEET_ROLLOUT_CHUNK = int(os.environ.get("FLEET_ROLLOUT_CHUNK", "100"))
FLEET_ROLLOUT_TICK_LIMIT = int(os.environ.get("FLEET_ROLLOUT_TICK_LIMIT", "5000"))
# Targets in flight at once per BMC class (platform name): "HGX H100 8-GPU=50,GB200 NVL72=18"; others the default.
FLEET_ROLLOUT_DEFAULT_CONCURRENCY = int(os.environ.get("FLEET_ROLLOUT_DEFAULT_CONCURRENCY", "500"))
FLEET_ROLLOUT_BMC_CONCURRENCY = {k.strip(): int(v) for k, _, v in (
    item.rpartition("=") for item in env_list("FLEET_ROLLOUT_BMC_CONCURRENCY")) if k.strip()}
# An update task still running after this long is inconclusive (the rollout pauses); activation must be
# verified (every targeted item at the new version) within FLEET_ROLLOUT_VERIFY_SECONDS.
FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS = int(os.environ.get("FLEET_ROLLOUT_TASK_TIMEOUT_SECONDS", "1800"))
FLEET_ROLLOUT_VERIFY_SECONDS = int(os.environ.get("FLEET_ROLLOUT_VERIFY_SECONDS", "900"))
# A release is revoked once its firmware failures reach this count AND this share of its outcomes.
FLEET_DEMOTE_MIN_FAILURES = int(os.environ.get("FLEET_DEMOTE_MIN_FAILURES", "3"))
FLEET_DEMOTE_FAILURE_RATIO = float(os.environ.get("FLEET_DEMOTE_FAILURE_RATIO", "0.2"))
# --- Telemetry --- (telemetry; docs/telemetry.md)
FLEET_TELEMETRY_RAW_DAYS = int(os.environ.get("FLEET_TELEMETRY_RAW_DAYS", "14"))  # raw samples, daily partitions
FLEET_TELEMETRY_5M_DAYS = int(os.environ.get("FLEET_TELEMETRY_5M_DAYS", "90"))  # 5-minute rollups
FLEET_TELEMETRY_PARTITIONS_AHEAD = int(os.environ.get("FLEET_TELEMETRY_PARTITIONS_AHEAD", "3"))  # days
FLEET_TELEMETRY_MAX_BYTES = int(os.environ.get("FLEET_TELEMETRY_MAX_BYTES", str(64 * 1024 * 1024)))  # one body
FLEET_TELEMETRY_SCRAPE_TIMEOUT = float(os.environ.get("FLEET_TELEMETRY_SCRAPE_TIMEOUT", "10"))  # seconds
FLEET_TELEMETRY_SCRAPE_CONCURRENCY = int(os.environ.get("FLEET_TELEMETRY_SCRAPE_CONCURRENCY", "16"))  # in flight
# Scrape sources claimed at once by one beat tick (sent 256 per message).
FLEET_TELEMETRY_SCRAPE_IN_FLIGHT = int(os.environ.get("FLEET_TELEMETRY_SCRAPE_IN_FLIGHT", "16384"))
FLEET_TELEMETRY_ROLLUP_GRACE = int(os.environ.get("FLEET_TELEMETRY_ROLLUP_GRACE", "120"))  # s of late data kept

# --- REST API ------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "fleet.tokens.ScopedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["fleet.roles.RolePermission"],
    # DRF's JSON encoded by orjson (fleet/renderers.py: the same JSON, a tenth of the CPU on large answers)
    "DEFAULT_RENDERER_CLASSES": ["fleet.renderers.JSONRenderer", "rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_PAGINATION_CLASS": "fleet.pagination.IdCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "fleet.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Fleet API",
    "DESCRIPTION": "Inventory, lifecycle and audit of a GPU fleet.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # One schema component for the GPU state enum, whichever field (state, from_state, to_state) uses it.
    "ENUM_NAME_OVERRIDES": {
        "GpuStateEnum": "inventory.models.GpuState",
        "TokenScopeEnum": "fleet.models.TokenScope",
        "PlanningScopeKindEnum": "procurement.models.planning.ScopeKind",
        "RmaEvidenceKindEnum": "procurement.models.rma.EvidenceKind",
        "CertificateKindEnum": "decommission.models.evidence.CertificateKind",
        "CustodyKindEnum": "decommission.models.evidence.CustodyKind",
        "ConfidentialityLevelEnum": "decommission.models.requests.Level",
    },
}

# --- Celery --------------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict = {"visibility_timeout": 3600}
else:
    _broker = VAR_DIR / "broker"
    for sub in ("out", "processed", "control"):
        (_broker / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker / "out"),
        "data_folder_out": str(_broker / "out"),
        "data_folder_processed": str(_broker / "processed"),
        "control_folder": str(_broker / "control"),  # exchange tables (kombu's default: ./control in the cwd)
        "store_processed": False,
    }
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = True
# Prefork workers enforce both (the solo pool cannot); a chunk stops taking work at half the soft limit
# (fleet.execution.TimeBudget) and handles the soft limit itself.
CELERY_TASK_TIME_LIMIT = float(os.environ.get("CELERY_TASK_TIME_LIMIT", "300"))
CELERY_TASK_SOFT_TIME_LIMIT = float(os.environ.get("CELERY_TASK_SOFT_TIME_LIMIT", "240"))
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "audit-retention": {"task": "fleet.tasks.audit_prune_task", "schedule": 3600.0},
    "jobs-resume-stalled": {"task": "fleet.tasks.jobs_resume_stalled_task", "schedule": 60.0},
    **TELEMETRY_BEAT_SCHEDULE,
    **FIRMWARE_BEAT_SCHEDULE,
}

# --- issue12b: abuse limits, tokens, metrics, probes, structured logs ---------------------------------------
# The cache keeps the sign-in throttle's counters where every gunicorn worker sees them: Redis when REDIS_URL
# is set, else a database table (`make setup` runs createcachetable).
CACHES = {
    "default": {"BACKEND": "fleet.cache.RedisCache", "LOCATION": REDIS_URL,  # one client per pool
                "KEY_PREFIX": "fleet"} if REDIS_URL else
    {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "fleet_cache"},
}

# --- issue8: the shared execution layer and the rollout engine's fault handling ---
# A request whose answer was lost is never sent again before the BMC has had this long to act on it (longer than
# its worst processing time); then the BMC is asked what it did (fleet/execution.py settle; docs/firmware.md).
FLEET_BMC_SETTLE_SECONDS = float(os.environ.get("FLEET_BMC_SETTLE_SECONDS", "60"))
FLEET_BMC_SETTLE_SECONDS_BY_CLASS = {k.strip(): float(v) for k, _, v in (
    item.rpartition("=") for item in env_list("FLEET_BMC_SETTLE_SECONDS_BY_CLASS")) if k.strip()}
# After a reset the engine sent, 404s and refused connections from that BMC are infrastructure (it is booting).
FLEET_BMC_BOOT_GRACE_SECONDS = float(os.environ.get("FLEET_BMC_BOOT_GRACE_SECONDS", "300"))
# Internal errors of a step (not the BMC): retried with backoff this many times, then the target is inconclusive.
FLEET_ROLLOUT_INTERNAL_ATTEMPTS = int(os.environ.get("FLEET_ROLLOUT_INTERNAL_ATTEMPTS", "5"))
# A request the BMC, asked after the settle period, proves never landed is sent again at most this many times
# (each time only on that proof); then the target is inconclusive.
FLEET_BMC_MAX_RESENDS = int(os.environ.get("FLEET_BMC_MAX_RESENDS", "3"))
# An update task the BMC aborted (it rebooted under it) is sent again at most this many times in all.
FLEET_ROLLOUT_ABORTED_ATTEMPTS = int(os.environ.get("FLEET_ROLLOUT_ABORTED_ATTEMPTS", "3"))

# --- issue16 (h16a): standard Redfish evidence, one clock, concurrency (docs/firmware.md) ---
# How long a BMC class is KNOWN to keep a finished task in its task collection (0 = not known: the absence of a
# task then proves nothing, and an unanswered update with no other evidence is UNKNOWN, never sent again).
FLEET_BMC_TASK_RETENTION_SECONDS = float(os.environ.get("FLEET_BMC_TASK_RETENTION_SECONDS", "0"))
FLEET_BMC_TASK_RETENTION_SECONDS_BY_CLASS = {k.strip(): float(v) for k, _, v in (
    item.rpartition("=") for item in env_list("FLEET_BMC_TASK_RETENTION_SECONDS_BY_CLASS")) if k.strip()}
# After an UNKNOWN, the BMC is asked again after this many settle periods; a second UNKNOWN holds the target.
FLEET_BMC_UNKNOWN_SETTLE_FACTOR = float(os.environ.get("FLEET_BMC_UNKNOWN_SETTLE_FACTOR", "3"))
# BMCs one worker process talks to at once (threads; one request in flight per BMC).
FLEET_ROLLOUT_WORKER_CONCURRENCY = int(os.environ.get("FLEET_ROLLOUT_WORKER_CONCURRENCY", "32"))
# A chunk leaves the servers still waiting on their BMC to their threads once half of its servers are done and none
# has answered for this long (seconds; 0: a chunk always waits for all of its servers).
FLEET_ROLLOUT_DETACH_SECONDS = float(os.environ.get("FLEET_ROLLOUT_DETACH_SECONDS", "0.25"))

# --- issue12a: the API contract (docs/api.md) ---
# Every API list takes only the query parameters it knows (an unknown one is a 400 naming it); every error
# is one of two JSON shapes; every operation's schema documents the error statuses it can answer.
REST_FRAMEWORK["DEFAULT_FILTER_BACKENDS"] = ["fleet.filters.StrictFilterBackend"]
REST_FRAMEWORK["EXCEPTION_HANDLER"] = "fleet.api_errors.exception_handler"
REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] = "fleet.api_errors.FleetAutoSchema"
REST_FRAMEWORK["DEFAULT_CONTENT_NEGOTIATION_CLASS"] = "fleet.negotiation.StrictContentNegotiation"

# --- issue12b (continued) ---
# Sign-in (/login/, /api/v1/auth/token/): attempts per client per minute; wrong passwords that lock an account
# or a client; how long a lock lasts (s). Checked before the password is hashed.
FLEET_LOGIN_CLIENT_RATE = int(os.environ.get("FLEET_LOGIN_CLIENT_RATE", "30"))
FLEET_LOGIN_ACCOUNT_FAILURES = int(os.environ.get("FLEET_LOGIN_ACCOUNT_FAILURES", "5"))
FLEET_LOGIN_CLIENT_FAILURES = int(os.environ.get("FLEET_LOGIN_CLIENT_FAILURES", "20"))
FLEET_LOGIN_LOCKOUT_SECONDS = int(os.environ.get("FLEET_LOGIN_LOCKOUT_SECONDS", "900"))
# The request header carrying the client's address behind a proxy (e.g. HTTP_X_FORWARDED_FOR); empty: REMOTE_ADDR.
FLEET_CLIENT_IP_HEADER = os.environ.get("FLEET_CLIENT_IP_HEADER", "")
# API tokens: lifetime of a token made by /api/v1/auth/token/ without expires_in_days (0: never expires), and
# the views a push-only token may POST to.
FLEET_TOKEN_DEFAULT_DAYS = int(os.environ.get("FLEET_TOKEN_DEFAULT_DAYS", "90"))
FLEET_PUSH_VIEW_NAMES = ("api:telemetry-prometheus", "api:telemetry-ingest")
# /api/schema/ and /api/docs/ are for signed-in users unless this opens them.
FLEET_PUBLIC_SCHEMA = env_bool("FLEET_PUBLIC_SCHEMA", False)
if not FLEET_PUBLIC_SCHEMA:
    SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"] = ["rest_framework.permissions.IsAuthenticated"]
# /metrics: a signed-in viewer or API token, or this scrape token (Authorization: Bearer <token>).
FLEET_METRICS_TOKEN = os.environ.get("FLEET_METRICS_TOKEN", "")
# prometheus_client's multiprocess mode (gunicorn workers and Celery processes share one directory); set
# before prometheus_client is imported anywhere.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "prometheus"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
# Logs: plain text (default) or LOG_FORMAT=json, one object per line with the request id.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text").strip().lower()
LOGGING = logging_config(fmt=LOG_FORMAT, level=os.environ.get("LOG_LEVEL", "INFO"))
CELERY_WORKER_HIJACK_ROOT_LOGGER = LOG_FORMAT != "json"  # json: the worker logs through LOGGING too

# --- issue10: procurement (orders, RMA, spares forecasting) ---
from procurement.schedule import BEAT_SCHEDULE as PROCUREMENT_BEAT_SCHEDULE  # noqa: E402

CELERY_BEAT_SCHEDULE.update(PROCUREMENT_BEAT_SCHEDULE)
# Purchase orders whose total is above this (in the order's currency) wait for an approver.
PROCUREMENT_APPROVAL_THRESHOLD = int(os.environ.get("FLEET_PO_APPROVAL_THRESHOLD", "1000000"))
# Default spares target: share of failures met from stock (type-2 service level); pools set their own.
PROCUREMENT_TARGET_FILL_RATE = float(os.environ.get("FLEET_SPARES_FILL_RATE", "0.95"))

# --- issue11: decommission (secure wipe, certificates, custody; docs/decommission.md) ---
DECOMMISSION_SIGNING_KEY_DIR = os.environ.get("DECOMMISSION_SIGNING_KEY_DIR", str(VAR_DIR / "decommission-keys"))
DECOMMISSION_ORGANIZATION = os.environ.get("DECOMMISSION_ORGANIZATION", "Fleet datacenter operations")
DECOMMISSION_LOCATION = os.environ.get("DECOMMISSION_LOCATION", "Datacenter decommission cage")
DECOMMISSION_CONTACT = os.environ.get("DECOMMISSION_CONTACT", "dc-ops@example.com")
DECOMMISSION_WEIGHT_TOLERANCE = os.environ.get("DECOMMISSION_WEIGHT_TOLERANCE", "0.01")  # of the outbound weight
DECOMMISSION_AGENT_TOKEN_SECONDS = int(os.environ.get("DECOMMISSION_AGENT_TOKEN_SECONDS", "3600"))
DECOMMISSION_LEASE_SECONDS = int(os.environ.get("DECOMMISSION_LEASE_SECONDS", "60"))
DECOMMISSION_MAX_DEVICE_FAILURES = 3
DECOMMISSION_CHUNK = int(os.environ.get("DECOMMISSION_CHUNK", "20"))  # assets per step task
CELERY_BEAT_SCHEDULE["decommission-tick"] = {"task": "decommission.tasks.tick_task", "schedule": 10.0}
DECOMMISSION_SETTLE_SECONDS = float(os.environ.get("DECOMMISSION_SETTLE_SECONDS", "30"))  # > a BMC's worst answer
DECOMMISSION_POLL_SECONDS = float(os.environ.get("DECOMMISSION_POLL_SECONDS", "2"))

# --- h12load: CPU per request (bench/load.py; docs/operations.md) ---
# {% url %} keeps the URLs that take no arguments per process (the navigation reverses ~15 on every page).
TEMPLATES[0]["OPTIONS"]["builtins"] = ["fleet.urltag"]

# Telemetry history backend (docs/telemetry.md): "embedded" (Fleet scrapes and keeps samples in its own database)
# or "prometheus" (Fleet reads a Prometheus-compatible store's HTTP API: Prometheus, VictoriaMetrics, Thanos, Mimir;
# no raw samples stored, Fleet's scraper off). Labels: dcgm-exporter's defaults, overridable for relabelled stores
# with FLEET_PROMETHEUS_LABELS='{"uuid": "gpu_uuid"}' (keys uuid, host, gpu, model).
FLEET_TELEMETRY_BACKEND = os.environ.get("FLEET_TELEMETRY_BACKEND", "embedded")
if FLEET_TELEMETRY_BACKEND not in ("embedded", "prometheus"):
    raise ImproperlyConfigured(f"FLEET_TELEMETRY_BACKEND={FLEET_TELEMETRY_BACKEND!r}: embedded or prometheus")
FLEET_PROMETHEUS_URL = os.environ.get("FLEET_PROMETHEUS_URL", "")
FLEET_PROMETHEUS_TOKEN = os.environ.get("FLEET_PROMETHEUS_TOKEN", "")  # bearer token
FLEET_PROMETHEUS_USER = os.environ.get("FLEET_PROMETHEUS_USER", "")  # basic auth (when no token)
FLEET_PROMETHEUS_PASSWORD = os.environ.get("FLEET_PROMETHEUS_PASSWORD", "")
FLEET_PROMETHEUS_CA = os.environ.get("FLEET_PROMETHEUS_CA", "")  # a CA bundle file for https
FLEET_PROMETHEUS_TIMEOUT = float(os.environ.get("FLEET_PROMETHEUS_TIMEOUT", "5"))  # s per request: then a message
FLEET_PROMETHEUS_SCRAPE_S = int(os.environ.get("FLEET_PROMETHEUS_SCRAPE_S", "30"))  # the exporters' interval
FLEET_PROMETHEUS_LABELS = json.loads(os.environ.get("FLEET_PROMETHEUS_LABELS", "{}"))
# The longest query Fleet sends (VictoriaMetrics refuses more than -search.maxQueryLen, 16 kB by default): a rack,
# row or site aggregate over more UUIDs is sent in parts (telemetry.promql_groups), this many queries at a time.
FLEET_PROMETHEUS_MAX_QUERY_BYTES = int(os.environ.get("FLEET_PROMETHEUS_MAX_QUERY_BYTES", "16384"))
FLEET_PROMETHEUS_CONCURRENCY = int(os.environ.get("FLEET_PROMETHEUS_CONCURRENCY", "4"))
# Embedded store: raw samples older than this many days are compacted per GPU and day (telemetry.compact).
FLEET_TELEMETRY_COMPACT_AFTER_DAYS = int(os.environ.get("FLEET_TELEMETRY_COMPACT_AFTER_DAYS", "2"))

# --- h19: the workload scheduler (drain/resume around maintenance; docs/scheduler.md) ---
# "" = no scheduler (everything works as before; pages say "no scheduler"); "slurm" = the Slurm CLI backend.
FLEET_SCHEDULER = os.environ.get("FLEET_SCHEDULER", "").strip().lower()
SLURM_CONF = os.environ.get("SLURM_CONF", "")  # the cluster's slurm.conf ("" = the clients' default)
FLEET_SCHEDULER_TIMEOUT_SECONDS = float(os.environ.get("FLEET_SCHEDULER_TIMEOUT_SECONDS", "10"))  # per CLI call
FLEET_SCHEDULER_CACHE_SECONDS = float(os.environ.get("FLEET_SCHEDULER_CACHE_SECONDS", "1"))  # one read per process
FLEET_SCHEDULER_REASON_PREFIX = os.environ.get("FLEET_SCHEDULER_REASON_PREFIX", "fleet:")  # marks Fleet's drains
FLEET_SCHEDULER_POLL_SECONDS = float(os.environ.get("FLEET_SCHEDULER_POLL_SECONDS", "5"))  # waiting for jobs
# The users of Fleet's Slurm maintenance reservations (``Users=``: only they could run jobs in one); one user or a
# comma-separated list, each known to the cluster.
FLEET_SLURM_RESERVATION_USER = os.environ.get("FLEET_SLURM_RESERVATION_USER", "root").strip()
# Never drain more than this % of a scheduler partition's nodes at once across rollouts (0 = no cap).
FLEET_SCHEDULER_PARTITION_MAX_DRAIN_PERCENT = float(os.environ.get("FLEET_SCHEDULER_PARTITION_MAX_DRAIN_PERCENT",
                                                                   "0"))
CELERY_BEAT_SCHEDULE["scheduler-refresh"] = {"task": "inventory.tasks.scheduler_refresh_task",
                                             "schedule": float(os.environ.get("FLEET_SCHEDULER_REFRESH_SECONDS",
                                                                              "30"))}

# --- h17b: every answer under /api/ is JSON, Django's and the server's refusals too ---
# The longest URL (path + query string) Fleet accepts; longer is a 414 (fleet.api_errors.UriLengthMiddleware).
FLEET_MAX_URL_LENGTH = int(os.environ.get("FLEET_MAX_URL_LENGTH", "8190"))
# OPTIONS never fails on a view without a serializer (fleet.metadata.FleetMetadata).
REST_FRAMEWORK["DEFAULT_METADATA_CLASS"] = "fleet.metadata.FleetMetadata"
