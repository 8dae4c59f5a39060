"""The role matrix for the REST API and the Django admin: viewer reads, operator and approver write,
only admin deletes; anonymous users are asked to authenticate. (The HTML UI's matrix is in the UI tests.)"""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from fleet.roles import ADMIN, OPERATOR, VIEWER
from inventory.models import Site
from tests import factories

pytestmark = pytest.mark.django_db
ROLES = [None, "viewer", "operator", "approver", "admin"]
RANK = {None: 0, VIEWER: 1, OPERATOR: 2, "approver": 3, ADMIN: 4}


@pytest.fixture
def world():
    gpu = factories.gpu(state="in_service")
    empty_site = factories.site("del1")
    return {"gpu": gpu, "site": empty_site}


def _site_form(site: Site, **changes):
    data = {"code": site.code, "name": site.name, "timezone": site.timezone,
            "electricity_price_kwh": str(site.electricity_price_kwh), "pue": str(site.pue)}
    return {**data, **changes}


# operation: (lowest role allowed, request, status when allowed)
API = {
    "read": (VIEWER, lambda c, w: c.get("/api/v1/gpus/"), 200),
    "write": (OPERATOR, lambda c, w: c.post("/api/v1/sites/", {"code": "new1", "name": "New"}, format="json"), 201),
    "transition": (OPERATOR, lambda c, w: c.post(f"/api/v1/gpus/{w['gpu'].pk}/transition/",
                                                 {"to_state": "drained"}, format="json"), 200),
    # An allowed role gets past the permission check to the request's validation (no file: 400).
    "import": (OPERATOR, lambda c, w: c.post("/api/v1/imports/", {"format": "csv"}, format="multipart"), 400),
    "delete": (ADMIN, lambda c, w: c.delete(f"/api/v1/sites/{w['site'].pk}/"), 204),
}


@pytest.mark.parametrize("role", ROLES, ids=[r or "anonymous" for r in ROLES])
@pytest.mark.parametrize("operation", list(API))
def test_api_role_matrix(api, world, role, operation):
    lowest, call, allowed_status = API[operation]
    response = call(api(role), world)
    if role is None:
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == "Token"
    elif RANK[role] >= RANK[lowest]:
        assert response.status_code == allowed_status, response.json()
    else:
        assert response.status_code == 403
        assert response.json() == {"detail": "Your role does not allow this.", "code": "permission_denied"}


def test_api_import_upload_is_refused_to_a_viewer_before_reading_the_file(api):
    response = api("viewer").post("/api/v1/imports/", {"file": SimpleUploadedFile("x.csv", b"serial\n1\n")},
                                  format="multipart")
    assert response.status_code == 403


ADMIN_OPS = {
    "changelist": (VIEWER, lambda c, w: c.get("/admin/inventory/gpu/"), 200),
    "change_post": (OPERATOR, lambda c, w: c.post(f"/admin/inventory/site/{w['site'].pk}/change/",
                                                  _site_form(w["site"], name="Renamed")), 302),
    "delete": (ADMIN, lambda c, w: c.post(f"/admin/inventory/site/{w['site'].pk}/delete/", {"post": "yes"}), 302),
}


@pytest.mark.parametrize("role", ROLES, ids=[r or "anonymous" for r in ROLES])
@pytest.mark.parametrize("operation", list(ADMIN_OPS))
def test_admin_role_matrix(client, users, world, role, operation):
    lowest, call, allowed_status = ADMIN_OPS[operation]
    if role:
        client.force_login(users[role])
    response = call(client, world)
    site_now = Site.objects.filter(pk=world["site"].pk).first()
    if role is None:
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    elif RANK[role] >= RANK[lowest]:
        assert response.status_code == allowed_status
        if operation == "change_post":
            assert site_now.name == "Renamed"
        if operation == "delete":
            assert site_now is None
    else:
        assert response.status_code == 403
    if role is None or RANK[role] < RANK[lowest]:
        assert site_now is not None and site_now.name == world["site"].name


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_admin_transition_action_needs_change_permission(client, users, world, role):
    client.force_login(users[role])
    gpu = world["gpu"]
    response = client.post("/admin/inventory/gpu/", {"action": "transition_selected", "_selected_action": [gpu.pk],
                                                     "apply": "1", "to_state": "drained"})
    gpu.refresh_from_db()
    if role == "viewer":  # the action is not offered: the changelist answers with its own page, nothing moves
        assert gpu.state == "in_service"
    else:
        assert response.status_code == 302 and gpu.state == "drained"


def test_history_is_read_only_in_the_admin_even_for_admins(client, users, world):
    client.force_login(users["admin"])
    change = world["gpu"].state_changes.get()
    assert client.get("/admin/inventory/gpustatechange/").status_code == 200
    assert client.get("/admin/inventory/gpustatechange/add/").status_code == 403
    assert client.post(f"/admin/inventory/gpustatechange/{change.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.get("/admin/fleet/auditevent/add/").status_code == 403


def test_viewer_sees_every_admin_page_read_only(client, users, operator):
    from django.contrib import admin

    from inventory import services

    gpu = factories.gpu(factories.server(), vbios_version="96.00.89")
    services.gpu_transition(gpu=gpu, to_state="drained", actor=operator)
    client.force_login(users["viewer"])
    for model, model_admin in admin.site._registry.items():
        opts = model._meta
        if opts.app_label not in {"inventory", "fleet"}:
            continue
        url = f"/admin/{opts.app_label}/{opts.model_name}/"
        page = client.get(url)
        assert page.status_code == 200, url
        assert 'name="_save"' not in page.content.decode()
        obj = model_admin.get_queryset(page.wsgi_request).first()
        if obj is not None:
            detail = client.get(f"{url}{obj.pk}/change/")
            assert detail.status_code == 200 and 'name="_save"' not in detail.content.decode(), url
