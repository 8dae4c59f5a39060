"""Scoped, expiring, revocable API tokens: issued by /api/v1/auth/token/ and on the account page, enforced on
every endpoint, shown and revoked on the account page and in the admin; DRF's legacy tokens keep working."""

from __future__ import annotations

import datetime as dt

from django.urls import reverse
from django.utils import timezone

from fleet.models import ApiToken, AuditAction, AuditEvent, TokenScope
from fleet.tokens import token_create
from tests import factories

PASSWORD = "pw-for-tests-only"  # noqa: S105
PUSH = "/api/v1/telemetry/prometheus"


def bearer(key: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Token {key}"}


def test_token_endpoint_issues_a_scoped_expiring_token(client, users):
    response = client.post("/api/v1/auth/token/", {"username": "viewer-user", "password": PASSWORD,
                                                   "scope": "read", "name": "grafana", "expires_in_days": 7})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["scope"] == "read" and body["name"] == "grafana"
    token = ApiToken.objects.get(user=users["viewer"])
    assert token.key_hash != body["token"] and token.prefix == body["token"][4:12]  # only a hash is stored
    assert dt.timedelta(days=6, hours=23) < token.expires_at - timezone.now() <= dt.timedelta(days=7)
    assert client.get("/api/v1/gpus/", **bearer(body["token"])).status_code == 200
    default = client.post("/api/v1/auth/token/", {"username": "viewer-user", "password": PASSWORD}).json()
    assert default["scope"] == "full" and default["expires_at"] is not None
    bad = client.post("/api/v1/auth/token/", {"username": "viewer-user", "password": PASSWORD, "scope": "root"})
    assert bad.status_code == 400 and "scope" in bad.json()


def test_read_only_token_cannot_write(client, users):
    _, key = token_create(user=users["operator"], name="dash", scope=TokenScope.READ, actor=users["operator"])
    assert client.get("/api/v1/sites/", **bearer(key)).status_code == 200
    response = client.post("/api/v1/sites/", {"code": "zz1", "name": "Z"}, content_type="application/json",
                           **bearer(key))
    assert response.status_code == 403 and "read-only" in response.json()["detail"]
    assert client.post(PUSH, "x 1\n", content_type="text/plain", **bearer(key)).status_code == 403
    _, full = token_create(user=users["operator"], name="ops", actor=users["operator"])
    assert client.post("/api/v1/sites/", {"code": "zz1", "name": "Z"}, content_type="application/json",
                       **bearer(full)).status_code == 201  # the same user's full token may (the role allows it)


def test_push_only_token_pushes_telemetry_and_nothing_else(client, users):
    server = factories.server(hostname="node-00200")
    gpu = factories.gpu(server)
    _, key = token_create(user=users["operator"], name="exporter", scope=TokenScope.PUSH, actor=users["operator"])
    body = f'DCGM_FI_DEV_GPU_TEMP{{UUID="{gpu.uuid}",Hostname="node-00200"}} 61\n'
    pushed = client.post(PUSH, body, content_type="text/plain", **bearer(key))
    assert pushed.status_code == 200 and pushed.json()["samples"] == 1
    assert client.get("/api/v1/gpus/", **bearer(key)).status_code == 403
    assert client.get("/api/v1/telemetry/heatmap/", **bearer(key)).status_code == 403
    assert client.post("/api/v1/sites/", {"code": "zz2", "name": "Z"}, content_type="application/json",
                       **bearer(key)).status_code == 403
    # A token never opens the HTML pages (they use the session).
    assert client.get(reverse("gpu-list"), **bearer(key)).status_code == 302


def test_expired_and_revoked_tokens_are_refused(client, users):
    token, key = token_create(user=users["viewer"], name="old", expires_in_days=1, actor=users["viewer"])
    assert client.get("/api/v1/gpus/", **bearer(key)).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    expired = client.get("/api/v1/gpus/", **bearer(key))
    assert expired.status_code == 401 and "expired" in expired.json()["detail"]
    token2, key2 = token_create(user=users["viewer"], name="other", actor=users["viewer"])
    client.force_login(users["viewer"])
    assert client.post(reverse("account-token-revoke", args=[token2.pk])).status_code == 302
    client.logout()
    revoked = client.get("/api/v1/gpus/", **bearer(key2))
    assert revoked.status_code == 401 and "revoked" in revoked.json()["detail"]
    event = AuditEvent.objects.get(action=AuditAction.REVOKE, object_id=str(token2.pk))
    assert event.actor == users["viewer"] and event.source == "ui"


def test_account_page_creates_shows_once_and_lists_tokens(client, users):
    client.force_login(users["viewer"])
    response = client.post(reverse("account"), {"name": "grafana", "scope": "read", "expires_in_days": 30},
                           HTTP_X_REQUEST_ID="acct-1")
    assert response.status_code == 200
    key = response.context["new_key"]
    assert key and key.encode() in response.content
    assert client.get("/api/v1/gpus/", **bearer(key)).status_code == 200
    page = client.get(reverse("account"))
    assert key.encode() not in page.content and key[4:12].encode() in page.content and b"Read-only" in page.content
    created = AuditEvent.objects.get(action=AuditAction.CREATE, content_type__model="apitoken")
    assert created.request_id == "acct-1" and created.changes["scope"] == [None, "read"]
    bad = client.post(reverse("account"), {"name": "", "scope": "root", "expires_in_days": -1})
    assert bad.status_code == 400 and ApiToken.objects.count() == 1


def test_users_cannot_revoke_each_others_tokens(client, users):
    token, _ = token_create(user=users["admin"], name="a", actor=users["admin"])
    client.force_login(users["viewer"])
    assert client.post(reverse("account-token-revoke", args=[token.pk])).status_code == 404
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None


def test_admin_lists_and_revokes_tokens(client, users):
    token, key = token_create(user=users["viewer"], name="dash", scope=TokenScope.READ, actor=users["viewer"])
    client.force_login(users["admin"])
    listing = client.get("/admin/fleet/apitoken/")
    assert listing.status_code == 200 and b"dash" in listing.content and key.encode() not in listing.content
    response = client.post("/admin/fleet/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
    assert response.status_code == 302
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert AuditEvent.objects.get(action=AuditAction.REVOKE).source == "admin"
    # A viewer sees only their own tokens in the admin.
    token_create(user=users["admin"], name="admin-only", actor=users["admin"])
    client.force_login(users["viewer"])
    own = client.get("/admin/fleet/apitoken/")
    assert b"dash" in own.content and b"admin-only" not in own.content


def test_legacy_drf_token_keeps_working_and_can_be_revoked(client, api, users):
    from rest_framework.authtoken.models import Token

    assert api("viewer").get("/api/v1/gpus/").status_code == 200
    client.force_login(users["viewer"])
    assert b"legacy token" in client.get(reverse("account")).content
    client.post(reverse("account-legacy-token-revoke"))
    assert not Token.objects.filter(user=users["viewer"]).exists()
