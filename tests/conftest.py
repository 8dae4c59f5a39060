import subprocess

import pytest
from django.contrib.auth import get_user_model

from fleet.roles import ROLES, user_set_role


@pytest.fixture
def make_user(db):
    def make(role: str | None, username: str | None = None):
        user = get_user_model().objects.create_user(username=username or f"{role or 'norole'}-user",
                                                    password="pw-for-tests-only")  # noqa: S106
        if role:
            user_set_role(user, role)
        return user

    return make


@pytest.fixture
def users(make_user):
    """One user per role: users['viewer'], users['operator'], users['approver'], users['admin']."""
    return {role: make_user(role) for role in ROLES}


@pytest.fixture
def operator(users):
    return users["operator"]


def pytest_configure(config):
    from django.conf import settings

    # (pyproject.toml's marker list is the lead's; the chaos marker of the rollout engine is registered here)
    config.addinivalue_line("markers", "chaos: a chaos run of the rollout engine on real worker processes "
                                       "(slow; `make test` runs it, `-m 'not chaos'` leaves it out)")

    # Hashing is not under test; PBKDF2's million rounds cost 0.3 s per user.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _cache_namespace(settings):
    """A fresh cache key prefix per test: sign-in throttle counters (kept in Redis across runs and processes)
    never carry from one test, or one run, to the next."""
    import uuid

    default = settings.CACHES["default"]
    settings.CACHES = {**settings.CACHES, "default": {**default, "KEY_PREFIX": f"t{uuid.uuid4().hex[:12]}"}}


@pytest.fixture
def api(users):
    """``api(role)``: a DRF test client authenticated with that role's token; ``api(None)`` is anonymous."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    def make(role: str | None = "operator") -> APIClient:
        client = APIClient()
        if role:
            token, _ = Token.objects.get_or_create(user=users[role])
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


@pytest.fixture
def no_eager_celery(settings):
    """For tests about real worker processes: fleet.dispatch must publish to the broker, never run a task in this
    process. It reads Celery's own config (``app.conf.task_always_eager``), which a fixture may flip at run time
    while Django's setting stays off, so both are checked."""
    from fleet import celery_app

    assert not settings.CELERY_TASK_ALWAYS_EAGER
    assert not celery_app.conf.task_always_eager, "eager mode is on: tasks would run in the test process"


@pytest.fixture
def eager_celery():
    """For page flows that are not about workers: background tasks run in the request that sends them."""
    from fleet import celery_app

    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture
def celery_worker_process(transactional_db, no_eager_celery):
    """A real Celery worker process (``--pool solo``, tests/workers.py) on this test database and
    settings.REDIS_URL; this process only publishes. A test that uses it is marked ``celery`` and skipped
    without REDIS_URL."""
    import redis
    from django.conf import settings

    from tests.workers import start_worker

    redis.Redis.from_url(settings.REDIS_URL).delete("celery")  # drop messages left by earlier runs
    proc = start_worker(broker=settings.REDIS_URL, output=subprocess.PIPE)
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


# Tables the migrations create with SQL (partitioned on PostgreSQL) rather than through models Django manages:
# the flush after a ``transactional_db`` test does not empty them, so rows would leak into later tests.
RAW_TELEMETRY_TABLES = ("telemetry_inbox", "telemetry_sample", "telemetry_counter", "telemetry_rollup5m",
                        "telemetry_rollupgroup5m")


@pytest.fixture(autouse=True)
def _empty_raw_telemetry_tables_after_transactional_tests(request):
    yield
    marker = request.node.get_closest_marker("django_db")
    transactional = (bool(marker and marker.kwargs.get("transaction"))
                     or {"transactional_db", "live_server"} & set(request.fixturenames))
    if not transactional:
        return
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {', '.join(RAW_TELEMETRY_TABLES)}")
        else:
            existing = set(connection.introspection.table_names(cursor))
            for table in RAW_TELEMETRY_TABLES:
                if table in existing:
                    cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names
