"""Sign-in throttling: per client and per account, before the password is hashed; 429 with Retry-After;
lockouts audited; nothing else slowed or refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.signals import user_login_failed
from django.urls import reverse

from fleet.models import AuditAction, AuditEvent

PASSWORD = "pw-for-tests-only"  # noqa: S105
TOKEN_URL = "/api/v1/auth/token/"  # noqa: S105


@pytest.fixture
def hashed():
    """Counts authentications that reached the password check (Django signals each failure)."""
    calls: list[str] = []

    def receiver(sender, credentials, **kwargs):
        calls.append(credentials.get("username"))

    user_login_failed.connect(receiver)
    yield calls
    user_login_failed.disconnect(receiver)


def test_25_wrong_passwords_on_the_login_page_lock_the_account_before_hashing(client, users, hashed):
    statuses = []
    for _ in range(25):
        response = client.post(reverse("login"), {"username": "viewer-user", "password": "wrong"},
                               REMOTE_ADDR="10.1.0.1", HTTP_X_REQUEST_ID="brute-1")
        statuses.append(response.status_code)
    assert statuses[:5] == [200] * 5  # the form with its error
    assert statuses[5:] == [429] * 20
    assert int(response["Retry-After"]) > 0
    assert b"Too many sign-in attempts" in response.content
    assert len(hashed) == 5  # the 20 refused attempts never reached the password hasher
    # Locked: even the right password is refused for a while, from another client too.
    right = client.post(reverse("login"), {"username": "viewer-user", "password": PASSWORD}, REMOTE_ADDR="10.1.0.2")
    assert right.status_code == 429
    event = AuditEvent.objects.get(action=AuditAction.LOCKOUT)
    assert event.object_id == str(users["viewer"].pk) and event.object_repr == "viewer-user"
    assert "5 wrong passwords" in event.message and "10.1.0.1" in event.message
    assert event.request_id == "brute-1"


def test_25_wrong_passwords_on_the_token_endpoint_answer_429_json(client, users, hashed):
    statuses = [client.post(TOKEN_URL, {"username": "operator-user", "password": "wrong"},
                            REMOTE_ADDR="10.1.1.1").status_code for _ in range(25)]
    assert statuses[:5] == [400] * 5 and statuses[5:] == [429] * 20
    response = client.post(TOKEN_URL, {"username": "operator-user", "password": PASSWORD}, REMOTE_ADDR="10.1.1.1")
    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    assert "Too many sign-in attempts" in response.json()["detail"]
    assert len(hashed) == 5


def test_one_client_guessing_many_accounts_is_locked_out(client, users, settings, hashed):
    settings.FLEET_LOGIN_CLIENT_FAILURES = 8
    statuses = [client.post(TOKEN_URL, {"username": f"nobody-{i}", "password": "x"}, REMOTE_ADDR="10.1.2.1").status_code
                for i in range(12)]
    assert statuses == [400] * 8 + [429] * 4
    assert len(hashed) == 8
    # Another client is not affected, and the accounts themselves are not locked.
    assert client.post(TOKEN_URL, {"username": "viewer-user", "password": PASSWORD},
                       REMOTE_ADDR="10.1.2.2").status_code == 200
    assert AuditEvent.objects.filter(action=AuditAction.LOCKOUT, message__contains="Client 10.1.2.1").count() == 1


def test_attempt_rate_per_client(client, users, settings):
    settings.FLEET_LOGIN_CLIENT_RATE = 3
    codes = [client.post(TOKEN_URL, {"username": "viewer-user", "password": PASSWORD},
                         REMOTE_ADDR="10.1.3.1").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]


def test_a_successful_sign_in_clears_the_account_failures(client, users):
    for _ in range(4):
        client.post(TOKEN_URL, {"username": "viewer-user", "password": "wrong"}, REMOTE_ADDR="10.1.4.1")
    assert client.post(TOKEN_URL, {"username": "viewer-user", "password": PASSWORD},
                       REMOTE_ADDR="10.1.4.1").status_code == 200
    for _ in range(4):
        assert client.post(TOKEN_URL, {"username": "viewer-user", "password": "wrong"},
                           REMOTE_ADDR="10.1.4.1").status_code == 400


def test_a_viewers_reads_are_unaffected_while_its_client_is_locked(client, api, users):
    for _ in range(25):
        client.post(TOKEN_URL, {"username": "viewer-user", "password": "wrong"}, REMOTE_ADDR="10.1.5.1")
    assert client.post(TOKEN_URL, {"username": "viewer-user", "password": "wrong"},
                       REMOTE_ADDR="10.1.5.1").status_code == 429
    # Same client address, same (locked) account: reads with a token or a session are answered.
    assert api("viewer").get("/api/v1/gpus/", REMOTE_ADDR="10.1.5.1").status_code == 200
    client.force_login(users["viewer"])
    assert client.get("/api/v1/gpus/", REMOTE_ADDR="10.1.5.1").status_code == 200
    assert client.get(reverse("gpu-list"), REMOTE_ADDR="10.1.5.1").status_code == 200
