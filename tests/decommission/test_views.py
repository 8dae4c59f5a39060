"""The decommission pages: list, wizard (policy preview, errors on the form, nothing written), request page with
actions by role, certificates with download and verify, custody form; query counts pinned."""

from __future__ import annotations

import pytest

from decommission.models import Certificate, DecommissionRequest
from tests.decommission.decom_factories import server_with_gpus, walk

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _keys(settings, tmp_path):
    settings.DECOMMISSION_SIGNING_KEY_DIR = str(tmp_path / "keys")


def _login(client, user):
    client.force_login(user)
    return client


def test_wizard_preview_and_errors(client, users):
    c = _login(client, users["operator"])
    page = c.get("/decommission/new/?category=high&destination=resale")
    assert page.status_code == 200 and b"<strong>Destroy</strong>" in page.content
    assert b"NVIDIA ships no secure erase" in page.content
    bad = c.post("/decommission/new/", {"servers": "ghost-1", "reason": "eol", "category": "low",
                                        "destination": "resale"})
    assert bad.status_code == 200 and b"Unknown server: ghost-1" in bad.content
    server = server_with_gpus()
    low = c.post("/decommission/new/", {"servers": server.hostname, "reason": "eol", "category": "high",
                                        "destination": "resale", "level": "clear"})
    assert b"below the policy minimum" in low.content and not DecommissionRequest.objects.exists()
    ok = c.post("/decommission/new/", {"servers": server.hostname, "reason": "eol", "category": "low",
                                       "destination": "resale"})
    assert ok.status_code == 302


def test_viewer_cannot_open_the_wizard(client, users):
    assert _login(client, users["viewer"]).get("/decommission/new/").status_code == 403


def test_detail_actions_by_role_and_refusal_message(client, users):
    r = walk("requested", users=users)
    page = _login(client, users["operator"]).get(f"/decommission/{r.pk}/")
    assert b'id="action-approve"' not in page.content and b'id="action-cancel"' in page.content
    approver = _login(client, users["approver"])
    assert b'id="action-approve"' in approver.get(f"/decommission/{r.pk}/").content
    resp = approver.post(f"/decommission/{r.pk}/action/certify/", follow=True)
    assert b"cannot" in resp.content
    approver.post(f"/decommission/{r.pk}/action/approve/")
    r.refresh_from_db()
    assert r.state == "approved"


def test_certificates_page_download_and_verify(client, users):
    r = walk("certified", users=users)
    c = _login(client, users["viewer"])
    page = c.get(f"/decommission/{r.pk}/certificates/")
    assert page.status_code == 200 and page.content.count(b"verify-btn") == Certificate.objects.filter(
        request=r).count()
    cert = Certificate.objects.filter(request=r).first()
    assert c.get(f"/decommission/certificates/{cert.pk}/download/").status_code == 200
    verdict = c.post(f"/decommission/certificates/{cert.pk}/verify/", HTTP_HX_REQUEST="true")
    assert b"Valid" in verdict.content


def test_list_and_detail_query_counts(client, users, django_assert_max_num_queries):
    walked = [walk("inventoried", users=users) for _ in range(3)]
    c = _login(client, users["viewer"])
    with django_assert_max_num_queries(12):
        page = c.get("/decommission/")
    assert page.status_code == 200
    body = page.content.decode()
    for r in walked:  # each request's link, state and requester, as the fixture made them
        assert f'href="/decommission/{r.pk}/"' in body
    assert body.count('class="badge ds-inventoried"') == 3 and body.count(">operator-user<") == 3
    r = DecommissionRequest.objects.first()
    with django_assert_max_num_queries(20):
        detail = c.get(f"/decommission/{r.pk}/")
    assert detail.status_code == 200
    body = detail.content.decode()
    assert 'data-state="inventoried"' in body and "end of life" in body
    assert r.assets.get().label in body  # the asset row
    for medium in r.media.all():  # every medium the inventory recorded, by serial
        assert medium.serial in body
