"""The API keeps its contract under fuzzing: schemathesis over the whole OpenAPI schema, against the WSGI app on
PostgreSQL, as an admin and as a viewer (docs/api.md).

Every operation the schema lists (whatever apps are installed when it runs) gets a bounded number of generated
requests (``CONTRACT_EXAMPLES``, default 6; the coverage phase is off), so the test stays at about two minutes. Each response must be
no server error, have a documented status and content type, and match its documented schema; a viewer's
writes must all be refused.

The schema comes from drf-spectacular's generator in the test process, not from ``/api/schema/`` (which may
ask for a sign-in); requests carry ``Authorization: Token <key>``.
"""

from __future__ import annotations

import datetime as dt
import os

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from hypothesis import HealthCheck, Phase, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from firmware.services import catalog
from fleet.audit import SYSTEM
from tests.firmware import rollout_fleet

EXAMPLES = int(os.environ.get("CONTRACT_EXAMPLES", "6"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
WRITES = {"POST", "PUT", "PATCH", "DELETE"}
# POSTs that write nothing: anyone may trade a password for their own token; a rollout preview only computes.
NOT_WRITES = {"/api/v1/auth/token/", "/api/v1/rollouts/preview/"}


def raw_schema() -> dict:
    """The OpenAPI document as drf-spectacular generates it (what /api/schema/ serves)."""
    import json

    from django.core.serializers.json import DjangoJSONEncoder
    from drf_spectacular.generators import SchemaGenerator

    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), cls=DjangoJSONEncoder))


@pytest.fixture
def contract_world(db, users):
    """A little of everything, so generated ids sometimes hit real rows. The WSGI handler runs in the test's
    transaction: like Django's test client, keep it from closing the connection at each request's end."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    fleet = rollout_fleet.build(servers=2)  # servers, GPUs, a bundle (created by the system: no created_by)
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"])  # targets, error_class ""
    catalog.baseline_create(bundle=fleet.bundle, actor=SYSTEM)  # proposed: approved_by null
    catalog.window_create(name="weekly", actor=SYSTEM, weekdays="2", start_time=dt.time(2, 0),
                          duration_minutes=60)
    assert rollout.targets.exists()
    yield users
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# Loaded at collection (Django is set up by then; generating the document needs no database). Not
# ``schemathesis.pytest.from_fixture``: its lazy loader does not run under pytest 9.
schema = schemathesis.openapi.from_dict(raw_schema())
schema.app = WSGIHandler()
# The coverage phase sends every boundary value of every parameter regardless of max_examples (minutes per
# run); the examples and the fuzzing phase (positive and negative data) with bounded examples stay.
schema.config.phases.coverage.enabled = False
bounded = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                   phases=[Phase.explicit, Phase.generate],
                   suppress_health_check=list(HealthCheck))


def token_for(users, role: str) -> dict[str, str]:
    token, _ = Token.objects.get_or_create(user=users[role])
    return {"Authorization": f"Token {token.key}"}


@schema.parametrize()
@bounded
def test_every_operation_keeps_its_contract_for_an_admin_and_a_viewer(case, contract_world):
    """Each generated request is sent as an admin, then as a viewer (one test per operation: building an
    operation's strategies costs more than its requests)."""
    case.call_and_validate(headers=token_for(contract_world, "admin"), checks=CHECKS)
    response = case.call_and_validate(headers=token_for(contract_world, "viewer"), checks=CHECKS)
    if case.method.upper() in WRITES and case.operation.path not in NOT_WRITES:
        # 403; 404 when the path names no route (a non-integer id); 405 for a method the route lacks.
        assert response.status_code in (403, 404, 405), (case.method, case.formatted_path, response.status_code,
                                                    response.text[:300])
