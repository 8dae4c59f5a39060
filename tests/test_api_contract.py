"""The API keeps its contract under fuzzing: schemathesis over the whole OpenAPI schema, against the WSGI app on
PostgreSQL, as an admin and as a viewer (docs/api.md).

- **Per operation** (one test each): ``CONTRACT_EXAMPLES`` generated requests (default 25; explicit examples,
  then fuzzing with positive and negative data), each sent as an admin and as a viewer. Each response must be
  no server error, have a documented status and content type, and match its documented schema; a viewer's
  writes must all be refused.
- **Stateful** (links on): schemathesis infers links between operations from the schema (an id one response
  gives, the path parameter of another) and runs sequences that follow them, as an admin and as a viewer,
  with the same checks on every step.
- **Every route answers OPTIONS** without a server error, in JSON.

Health checks stay on, except two that do not apply: ``function_scoped_fixture`` (the world is built once
per operation on purpose: building it per example would cost more than the requests) and ``too_slow``
(a measure of this machine's speed; no test here asserts on timing). Hypothesis is derandomized (one
fixed seed per test: a run is repeatable and a failure reproduces) and has no deadline. The coverage phase
(every boundary value of every parameter, regardless of the example budget: tens of minutes) stays off;
what it found is covered here by the OPTIONS sweep and tests/fleet/test_api_errors.py (too many form
fields, an over-long URL).

The schema comes from drf-spectacular's generator in the test process, not from ``/api/schema/`` (which may
ask for a sign-in); requests carry ``Authorization: Token <key>``.
"""

from __future__ import annotations

import datetime as dt
import os
import re

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

EXAMPLES = int(os.environ.get("CONTRACT_EXAMPLES", "25"))
STATEFUL_EXAMPLES = int(os.environ.get("CONTRACT_STATEFUL_EXAMPLES", "40"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
WRITES = {"POST", "PUT", "PATCH", "DELETE"}
# POSTs that write nothing: anyone may trade a password for their own token; a rollout preview only computes.
NOT_WRITES = {"/api/v1/auth/token/", "/api/v1/rollouts/preview/"}
# Health checks that do not apply (see the module's docstring); every other one is on.
NOT_APPLICABLE = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def raw_schema() -> dict:
    """The OpenAPI document as drf-spectacular generates it (what /api/schema/ serves)."""
    import json

    from django.core.serializers.json import DjangoJSONEncoder
    from drf_spectacular.generators import SchemaGenerator

    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), cls=DjangoJSONEncoder))


@pytest.fixture
def contract_world(db, users, settings, tmp_path):
    """A little of everything, so generated ids sometimes hit real rows (and stateful links find some): a
    rollout with targets, a baseline, a window, a decommission request with its assets and media (``outcome``
    still empty; walking one on to certificates and custody costs seconds per operation), a purchase order.
    The WSGI handler runs in the test's transaction: like
    Django's test client, keep it from closing the connection at each request's end."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    from tests.decommission.decom_factories import walk
    from tests.procurement import helpers

    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    fleet = rollout_fleet.build(servers=2)  # servers, GPUs, a bundle (created by the system: no created_by)
    rollout = rollout_fleet.approved(fleet, users["operator"], users["approver"])  # targets, error_class ""
    catalog.baseline_create(bundle=fleet.bundle, actor=SYSTEM)  # proposed: approved_by null
    catalog.window_create(name="weekly", actor=SYSTEM, weekdays="2", start_time=dt.time(2, 0),
                          duration_minutes=60)
    walk("inventoried", users=users)  # assets and media (progress, media, agent-token); outcome "" until disposed
    helpers.order(quantity=2, reference="PO-C1")  # approved (below the approval threshold)
    assert rollout.targets.exists()
    yield users
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# Loaded at collection (Django is set up by then; generating the document needs no database). Not
# ``schemathesis.pytest.from_fixture``: its lazy loader does not run under pytest 9.
schema = schemathesis.openapi.from_dict(raw_schema())
schema.app = WSGIHandler()
schema.config.phases.coverage.enabled = False
bounded = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                   phases=[Phase.explicit, Phase.generate], suppress_health_check=NOT_APPLICABLE)


def token_for(users, role: str) -> dict[str, str]:
    token, _ = Token.objects.get_or_create(user=users[role])
    return {"Authorization": f"Token {token.key}"}


def assert_viewer_refused(case, response) -> None:
    if case.method.upper() in WRITES and case.operation.path not in NOT_WRITES:
        # 403; 404 when the path names no route (a non-integer id); 405 for a method the route lacks.
        assert response.status_code in (403, 404, 405), (case.method, case.formatted_path, response.status_code,
                                                    response.text[:300])


@schema.parametrize()
@bounded
def test_every_operation_keeps_its_contract_for_an_admin_and_a_viewer(case, contract_world):
    """Each generated request is sent as an admin, then as a viewer (one test per operation: building an
    operation's strategies costs more than its requests)."""
    case.call_and_validate(headers=token_for(contract_world, "admin"), checks=CHECKS)
    response = case.call_and_validate(headers=token_for(contract_world, "viewer"), checks=CHECKS)
    assert_viewer_refused(case, response)


@pytest.mark.parametrize("role", ["admin", "viewer"])
def test_stateful_sequences_keep_the_contract(contract_world, role):
    """Sequences of calls that follow the links schemathesis infers (a created or listed object's id used by
    the next operation), every step checked; a viewer's writes along the way are refused."""
    from django.db import transaction

    machine = schema.as_state_machine()
    headers = token_for(contract_world, role)
    steps = []

    class Sequences(machine):  # type: ignore[misc, valid-type]
        def setup(self):
            # Each sequence starts from the same world (a savepoint rolled back at its end): a replayed
            # sequence meets the rows it met the first time.
            self.savepoint = transaction.atomic()
            self.savepoint.__enter__()

        def teardown(self):
            transaction.set_rollback(True)
            self.savepoint.__exit__(None, None, None)

        def get_call_kwargs(self, case):
            return {"headers": headers}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            given = {str(v) for v in (case.path_parameters or {}).values()}
            steps.append((case.method, case.operation.path, response.status_code, bool(given & seen)))
            seen.update(response_ids(response))
            case.validate_response(response, checks=CHECKS)
            if role == "viewer":
                assert_viewer_refused(case, response)

    seen: set[str] = set()
    Sequences.run(settings=settings(max_examples=STATEFUL_EXAMPLES, stateful_step_count=6, deadline=None,
                                    derandomize=True, database=None, suppress_health_check=NOT_APPLICABLE))
    # The links were followed: steps on a path whose id an earlier response gave (whatever they answered: a
    # refusal of a real object is checked against the contract as much as its success).
    linked = [s for s in steps if s[3]]
    assert linked, steps[:50]


def response_ids(response) -> set[str]:
    """The ids a JSON answer names: its own and its results'."""
    try:
        body = response.json()
    except ValueError:
        return set()
    rows = body.get("results", []) if isinstance(body, dict) else body if isinstance(body, list) else []
    rows = [*rows, body] if isinstance(body, dict) else rows
    return {str(row["id"]) for row in rows if isinstance(row, dict) and "id" in row}


def real_url(path: str) -> str:
    """``path`` with its parameters filled: the id of a row of the route's own queryset where it has one."""
    from django.urls import Resolver404, resolve

    for placeholder in ("1", "00000000-0000-0000-0000-000000000000"):  # an integer id, or a UUID
        url = re.sub(r"\{[^}]+\}", placeholder, path)
        try:
            view = getattr(resolve(url).func, "cls", None)
        except Resolver404:
            continue
        queryset = getattr(view, "queryset", None)
        first = queryset.model.objects.order_by("pk").values_list("pk", flat=True).first() \
            if queryset is not None else None
        return re.sub(r"\{[^}]+\}", str(first or placeholder), path)
    return path


def test_every_route_answers_options_in_json(contract_world):
    """``OPTIONS`` on every path of the schema, with a real id where the path takes one: never a server error,
    always JSON (DRF's description of the route, or an error in the project's shape)."""
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=token_for(contract_world, "admin")["Authorization"])
    failures = []
    for path in schema.raw_schema["paths"]:
        url = real_url(path)
        response = client.options(url)
        content_type = response.get("Content-Type", "")
        if response.status_code >= 500 or not content_type.startswith("application/json"):
            failures.append((url, response.status_code, content_type, response.content[:200]))
    assert failures == [], "\n".join(map(str, failures))
