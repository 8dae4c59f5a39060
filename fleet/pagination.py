from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.core import signing
from django.db.models import F, Q, QuerySet
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination


class IdCursorPagination(CursorPagination):
    """Cursor pagination on the primary key: constant cost at any depth, no COUNT(*).

    A cursor that is not one this API handed out is a 400 naming ``cursor`` (DRF answers 404, and a
    cursor whose position is not an id would reach the database).
    """

    ordering = "id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 1000

    def decode_cursor(self, request: Any) -> Any:
        try:
            cursor = super().decode_cursor(request)
            ordering = (self.ordering,) if isinstance(self.ordering, str) else tuple(self.ordering)
            if cursor is not None and cursor.position is not None and ordering[0].lstrip("-") in ("id", "pk"):
                int(cursor.position)
        except (NotFound, ValueError):
            raise ValidationError({self.cursor_query_param: ["Not a cursor this API handed out: follow the "
                                                             "next and previous links."]}) from None
        return cursor


# --- keyset pagination for HTML lists -----------------------------------------------------------------
# ``?after=<cursor>`` walks a list on (sort value, id): every page is one indexed range scan with LIMIT
# size + 1 (the extra row says whether there is a next page). No COUNT(*), no OFFSET.
# Sorting on the primary key keeps the cursor a plain id (``?after=1234``); any other sort signs the
# (value, id) pair into a URL-safe token so a hand-edited cursor is simply ignored.

_SALT = "fleet.pagination.keyset"


@dataclass(frozen=True)
class KeysetPage[T]:
    items: list[T]
    sort: str
    next_after: str | None  # cursor of the next page, None on the last page
    after: str | None  # cursor this page was asked for (None on the first page)

    @property
    def has_next(self) -> bool:
        return self.next_after is not None

    @property
    def is_first(self) -> bool:
        return self.after is None


def _sort_field(qs: QuerySet[Any], sort: str) -> tuple[str, bool, bool]:
    """(field name, descending, nullable) for a sort key such as ``serial`` or ``-id``."""
    descending = sort.startswith("-")
    name = sort.lstrip("-")
    field = qs.model._meta.get_field(name)
    return name, descending, bool(getattr(field, "null", False))


def _decode(cursor: str | None, *, by_id: bool, sort: str) -> tuple[Any, int] | None:
    if not cursor:
        return None
    if by_id:
        return (None, int(cursor)) if cursor.isdigit() else None
    try:
        value, pk = signing.loads(cursor, salt=f"{_SALT}.{sort}")
    except (signing.BadSignature, TypeError, ValueError):
        return None
    return value, int(pk)


def _encode(obj: Any, *, name: str, pk_name: str, by_id: bool, sort: str) -> str:
    """The cursor after ``obj``: a model instance, or a ``.values()`` row."""
    if isinstance(obj, dict):
        value, pk = obj[name], obj[pk_name]
    else:
        value, pk = getattr(obj, name), obj.pk
    if by_id:
        return str(pk)
    return signing.dumps([value, pk], salt=f"{_SALT}.{sort}", compress=False)


def keyset_page[T](qs: QuerySet[T], *, after: str | None, size: int, sort: str = "id",
                   allowed: Collection[str] = ("id", "-id")) -> KeysetPage[T]:
    """One page of ``qs`` (model instances or ``.values()`` rows) ordered by ``sort`` then id, starting
    after the ``after`` cursor.

    ``sort`` outside ``allowed`` falls back to the first allowed key; a bad cursor gives the first page.
    Sort values must be JSON scalars (text, numbers); NULLs sort last ascending, first descending.
    """
    if sort not in allowed:
        sort = next(iter(allowed))
    name, descending, nullable = _sort_field(qs, sort)
    by_id = name == qs.model._meta.pk.name
    position = _decode(after, by_id=by_id, sort=sort)
    gt, lt = ("lt", "gt") if descending else ("gt", "lt")
    pk_order = "-pk" if descending else "pk"
    if by_id:
        qs = qs.order_by(pk_order)
        if position is not None:
            qs = qs.filter(**{f"pk__{gt}": position[1]})
    else:
        column = F(name).desc(nulls_first=True) if descending else F(name).asc(nulls_last=True)
        qs = qs.order_by(column, pk_order)
        if position is not None:
            value, pk = position
            if value is None:  # inside the NULL block
                cond = Q(**{f"{name}__isnull": True, f"pk__{gt}": pk})
                if descending:  # NULLs come first descending: every non-NULL row is still ahead
                    cond |= Q(**{f"{name}__isnull": False})
            else:
                cond = Q(**{f"{name}__{gt}": value}) | Q(**{name: value, f"pk__{gt}": pk})
                if nullable and not descending:  # NULLs come last ascending
                    cond |= Q(**{f"{name}__isnull": True})
            qs = qs.filter(cond)
    rows = list(qs[: size + 1])
    pk_name = qs.model._meta.pk.name
    next_after = (_encode(rows[size - 1], name=name, pk_name=pk_name, by_id=by_id, sort=sort)
                  if len(rows) > size else None)
    return KeysetPage(items=rows[:size], sort=sort, next_after=next_after, after=after if position else None)


# --- keyset pages in a queryset's own multi-column order ----------------------------------------------------
# Catalog lists sort on several columns (component, then newest version; platform, pool, newest first). The
# cursor signs the last row's values of every ordering column; the next page is the rows after it in that
# order: one range condition, LIMIT size + 1, no COUNT(*), no OFFSET. NULLs sort last ascending and first
# descending (PostgreSQL's default), on every database.


def _cursor_value(value: Any) -> Any:
    if isinstance(value, dt.date):  # datetimes too; the field parses the ISO text back
        return value.isoformat()
    if isinstance(value, Decimal | UUID):
        return str(value)
    return value


def _rows_after(keys: list[tuple[str, bool]], values: list[Any]) -> Q:
    """Rows strictly after ``values`` in the order of ``keys`` ((alias, descending) pairs)."""
    after: Q | None = None
    equal = Q()
    for (alias, descending), value in zip(keys, values, strict=True):
        if value is None:
            beyond = Q(**{f"{alias}__isnull": False}) if descending else None  # NULLs: first desc, last asc
            same = Q(**{f"{alias}__isnull": True})
        else:
            beyond = Q(**{f"{alias}__{'lt' if descending else 'gt'}": value})
            if not descending:
                beyond |= Q(**{f"{alias}__isnull": True})
            same = Q(**{alias: value})
        if beyond is not None:
            after = equal & beyond if after is None else after | (equal & beyond)
        equal &= same
    return after if after is not None else Q(pk__in=[])


def keyset_page_ordered[T](qs: QuerySet[T], *, after: str | None, size: int) -> KeysetPage[T]:
    """One page of ``qs`` in its own ``order_by`` (plain field paths, ending in the primary key), starting after
    the ``after`` cursor. A bad or stale cursor gives the first page."""
    order = [str(term) for term in qs.query.order_by]
    if not order or order[-1].lstrip("-") not in ("id", "pk"):
        raise ValueError(f"keyset pages need an ordering that ends in the primary key, not {order}")
    keys = [(f"keyset_{i}", term.startswith("-")) for i, term in enumerate(order)]
    qs = qs.annotate(**{alias: F(term.lstrip("-")) for (alias, _), term in zip(keys, order, strict=True)})
    qs = qs.order_by(*[F(alias).desc(nulls_first=True) if descending else F(alias).asc(nulls_last=True)
                       for alias, descending in keys])
    salt = f"{_SALT}.{qs.model._meta.label_lower}.{','.join(order)}"
    position = None
    if after:
        try:
            position = signing.loads(after, salt=salt)
        except (signing.BadSignature, TypeError, ValueError):
            position = None
    if isinstance(position, list) and len(position) == len(keys):
        qs = qs.filter(_rows_after(keys, position))
    else:
        position = None
    rows = list(qs[: size + 1])
    next_after = (signing.dumps([_cursor_value(getattr(rows[size - 1], alias)) for alias, _ in keys], salt=salt,
                                compress=False) if len(rows) > size else None)
    return KeysetPage(items=rows[:size], sort=",".join(order), next_after=next_after,
                      after=after if position is not None else None)
