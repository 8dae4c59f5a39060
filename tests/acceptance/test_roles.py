"""Who may do what in the acceptance app: viewers read, operators post results and move groups, admins edit
policies (audited); anonymous users go to the login page."""

from __future__ import annotations

import pytest

from acceptance.models import BurnInPolicy
from fleet.models import AuditEvent
from tests import factories

pytestmark = pytest.mark.django_db

PAGES = ["/acceptance/", "/acceptance/infant-mortality/"]


@pytest.mark.parametrize("role", [None, "viewer", "operator"])
def test_pages(client, make_user, role):
    server = factories.server()
    if role:
        client.force_login(make_user(role))
    for url in [*PAGES, f"/acceptance/racks/{server.rack_id}/"]:
        response = client.get(url)
        assert response.status_code == (302 if role is None else 200), url
    action = client.post(f"/acceptance/racks/{server.rack_id}/action/", {"action": "start"})
    upload = client.post(f"/acceptance/servers/{server.pk}/upload/", {})
    expected = {None: 302, "viewer": 403, "operator": 302}[role]
    assert (action.status_code, upload.status_code) == (expected, expected)


@pytest.mark.parametrize(("role", "read", "write"), [(None, 401, 401), ("viewer", 200, 403),
                                                     ("operator", 200, 400)])
def test_api(api, role, read, write):
    client = api(role) if role else api(None)
    for url in ["/api/v1/acceptance/diag-runs/", "/api/v1/acceptance/checks/", "/api/v1/acceptance/infant-mortality/"]:
        assert client.get(url).status_code == read, url
    assert client.post("/api/v1/acceptance/diag-runs/", {"document": "{}"}, format="json").status_code == write
    assert client.post("/api/v1/acceptance/checks/", {}, format="json").status_code == write


def test_admin_edits_policies_audited(client, users):
    model = factories.gpu_model()
    client.force_login(users["admin"])
    response = client.post("/admin/acceptance/burninpolicy/add/", {
        "gpu_model": model.pk, "min_level": 3, "required_runs": 2, "min_hours": 24, "required_tests": "[]",
        "required_checks": '["nccl_allreduce_busbw"]', "return_min_level": 3, "return_runs": 1, "infant_days": 60})
    assert response.status_code == 302, response.content.decode()[:2000]
    policy = BurnInPolicy.objects.get(gpu_model=model)
    assert policy.required_checks == ["nccl_allreduce_busbw"]
    assert AuditEvent.objects.filter(action="create", object_id=str(policy.pk)).exists()
