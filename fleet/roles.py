"""Roles: viewer (read), operator (edit, import, transition), approver (operator + approvals), admin.

A role is a Django group. Groups carry model permissions too (see ``roles_sync``), so the Django
admin enforces the same matrix; the UI and the API ask :func:`has_role`.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, Permission
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest
from rest_framework.permissions import SAFE_METHODS, BasePermission

VIEWER, OPERATOR, APPROVER, ADMIN = "viewer", "operator", "approver", "admin"
ROLES = (VIEWER, OPERATOR, APPROVER, ADMIN)

# What each role may do, on top of the roles it includes.
_IMPLIES: dict[str, set[str]] = {
    VIEWER: {VIEWER},
    OPERATOR: {VIEWER, OPERATOR},
    APPROVER: {VIEWER, OPERATOR, APPROVER},
    ADMIN: {VIEWER, OPERATOR, APPROVER, ADMIN},
}

# Apps whose models the roles act on in the Django admin.
_ADMIN_APPS = ("inventory", "telemetry", "fleet", "procurement", "decommission", "acceptance")


def user_roles(user: AbstractBaseUser | AnonymousUser | None) -> set[str]:
    if user is None or not user.is_authenticated:
        return set()
    cached = getattr(user, "_fleet_roles", None)
    if cached is not None:
        return cached
    return roles_from_groups(user, () if user.is_superuser else group_names(user.pk))


def roles_from_groups(user: AbstractBaseUser, names: Iterable[str]) -> set[str]:
    """The roles of ``user`` given the names of its groups, kept on the user for the rest of the request."""
    if user.is_superuser:  # type: ignore[attr-defined]
        roles = set(ROLES)
    else:
        roles = set()
        for name in names:
            roles |= _IMPLIES.get(name, set())
    user._fleet_roles = roles  # type: ignore[attr-defined]
    return roles


_GROUPS_SQL: dict[str, str] = {}


def groups_join(db: BaseDatabaseWrapper, user_column: str) -> str:
    """``LEFT JOIN``s that add the column ``g.name`` (the user's groups, one row each) to a statement whose
    user id is ``user_column``."""
    field = get_user_model()._meta.get_field("groups")
    quote = db.ops.quote_name
    table, user_id, group_id = field.m2m_db_table(), field.m2m_column_name(), field.m2m_reverse_name()  # type: ignore[union-attr]
    return (f"LEFT JOIN {quote(table)} ug ON ug.{quote(user_id)} = {user_column} "
            f"LEFT JOIN {quote(Group._meta.db_table)} g ON g.{quote('id')} = ug.{quote(group_id)}")


def group_names(user_id: int) -> list[str]:
    """Names of the user's groups: one fixed statement (the ORM's ``user.groups.values_list`` costs ~4x the
    CPU, on every request)."""
    sql = _GROUPS_SQL.get(connection.vendor)
    if sql is None:
        field = get_user_model()._meta.get_field("groups")
        quote = connection.ops.quote_name
        sql = _GROUPS_SQL[connection.vendor] = (
            f"SELECT g.{quote('name')} FROM {quote(field.m2m_db_table())} ug "  # type: ignore[union-attr]
            f"JOIN {quote(Group._meta.db_table)} g ON g.{quote('id')} = ug.{quote(field.m2m_reverse_name())} "  # type: ignore[union-attr]
            f"WHERE ug.{quote(field.m2m_column_name())} = %s")  # type: ignore[union-attr]
    with connection.cursor() as cursor:
        cursor.execute(sql, [user_id])
        return [name for (name,) in cursor.fetchall()]


def has_role(user: AbstractBaseUser | AnonymousUser | None, role: str) -> bool:
    return role in user_roles(user)


def roles_sync() -> None:
    """Create the role groups and give them the model permissions the admin checks."""
    perms = Permission.objects.filter(content_type__app_label__in=_ADMIN_APPS).select_related("content_type")
    by_action: dict[str, list[Permission]] = {"view": [], "add": [], "change": [], "delete": []}
    for perm in perms:
        by_action.setdefault(perm.codename.split("_", 1)[0], []).append(perm)
    grants = {
        VIEWER: by_action["view"],
        OPERATOR: by_action["view"] + by_action["add"] + by_action["change"],
        APPROVER: by_action["view"] + by_action["add"] + by_action["change"],
        ADMIN: by_action["view"] + by_action["add"] + by_action["change"] + by_action["delete"],
    }
    for role, role_perms in grants.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(role_perms)


def user_set_role(user: AbstractBaseUser, role: str) -> None:
    """Give ``user`` exactly one role. Role users are staff so the admin applies their permissions."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    roles_sync()
    user.groups.set([Group.objects.get(name=role)])  # type: ignore[attr-defined]
    user.is_staff = True  # type: ignore[attr-defined]
    user.save()
    if hasattr(user, "_fleet_roles"):
        del user._fleet_roles


def roles_context(request: HttpRequest) -> dict[str, object]:
    roles = user_roles(getattr(request, "user", None))
    return {"can": {role: role in roles for role in ROLES}}


class RolePermission(BasePermission):
    """API: reads need viewer, writes need operator; a view may set ``required_role`` per action."""

    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:  # type: ignore[no-untyped-def]
        if not request.user or not request.user.is_authenticated:
            return False
        action = getattr(view, "action", None)
        required = getattr(view, "required_roles", {}).get(action)
        if required is None:
            required = VIEWER if request.method in SAFE_METHODS else OPERATOR
        return has_role(request.user, required)
