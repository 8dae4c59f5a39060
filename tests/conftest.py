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

    # Hashing is not under test; PBKDF2's million rounds cost 0.3 s per user.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


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
