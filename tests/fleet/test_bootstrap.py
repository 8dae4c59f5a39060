"""bootstrap: role groups, the admin account, the demo fleet and demo users; safe to run on every start."""

import io
import stat

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command

from fleet.roles import ROLES, user_roles
from inventory.models import Gpu
from tests import factories

User = get_user_model()


@pytest.fixture
def var_dir(settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    monkeypatch.delenv("FLEET_ADMIN_USER", raising=False)
    monkeypatch.delenv("FLEET_ADMIN_PASSWORD", raising=False)
    monkeypatch.delenv("PORT", raising=False)
    return tmp_path


def bootstrap(*args: str) -> str:
    out = io.StringIO()
    call_command("bootstrap", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_creates_roles_and_an_admin_with_a_generated_password(var_dir):
    out = bootstrap()
    assert set(Group.objects.values_list("name", flat=True)) >= set(ROLES)
    assert Group.objects.get(name="viewer").permissions.filter(codename="view_gpu").exists()
    path = var_dir / "admin-password"
    password = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(password) >= 12
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(password)
    assert user_roles(admin) == set(ROLES)
    assert f"Log in at http://127.0.0.1:8000/ as admin / {password}" in out
    assert out.count(password) == 1 and out.rstrip().endswith(password)  # once, and last
    assert not Gpu.objects.exists()  # no demo unless asked


@pytest.mark.django_db
def test_second_run_changes_nothing_and_says_where_the_password_is(var_dir):
    bootstrap("--demo-gpus", "40")
    password = (var_dir / "admin-password").read_text()
    hashes = dict(User.objects.values_list("username", "password"))
    out = bootstrap("--demo-gpus", "40")
    assert (var_dir / "admin-password").read_text() == password
    assert dict(User.objects.values_list("username", "password")) == hashes
    assert Gpu.objects.count() == 40
    assert str(var_dir / "admin-password") in out and "exists" in out
    assert password.strip() not in out


@pytest.mark.django_db
def test_demo_fleet_and_demo_users_only_into_an_empty_inventory(var_dir):
    out = bootstrap("--demo-gpus", "40")
    assert Gpu.objects.count() == 40
    demo_password = (var_dir / "demo-password").read_text().strip()
    for role in ("viewer", "operator", "approver"):
        user = User.objects.get(username=role)
        assert role in user_roles(user) and user.check_password(demo_password)
        assert not user.is_superuser
    assert demo_password in out


@pytest.mark.django_db
def test_does_not_seed_an_inventory_that_has_gpus(var_dir):
    factories.gpu()
    out = bootstrap("--demo-gpus", "40")
    assert Gpu.objects.count() == 1
    assert not User.objects.filter(username__in=["viewer", "operator", "approver"]).exists()
    assert "not loaded" in out


@pytest.mark.django_db
def test_honours_fleet_admin_user_and_password(var_dir, monkeypatch):
    monkeypatch.setenv("FLEET_ADMIN_USER", "ops-lead")
    monkeypatch.setenv("FLEET_ADMIN_PASSWORD", "a-long-enough-password")
    out = bootstrap()
    user = User.objects.get(username="ops-lead")
    assert user.is_superuser and user.check_password("a-long-enough-password")
    assert not User.objects.filter(username="admin").exists()
    assert not (var_dir / "admin-password").exists()
    assert "a-long-enough-password" not in out and "FLEET_ADMIN_PASSWORD" in out
    # an existing account is never changed, even when the environment now says otherwise
    monkeypatch.setenv("FLEET_ADMIN_PASSWORD", "another-password-entirely")
    bootstrap()
    user.refresh_from_db()
    assert user.check_password("a-long-enough-password")
