"""Reads that run on every view of a page, with the SQL the ORM writes for them kept per process.

Django compiles a queryset to SQL every time it is evaluated. For a read of one object's rows by an indexed
column (a GPU's state history, its audit trail) the compiling is most of the read's CPU: ~0.3 of ~0.5 ms, when
running the same statement through ``RawQuerySet`` costs ~0.14 ms (bench/README.md, the GPU page). A kept read
is built once from its queryset with stand-in values for its parameters, so the statement is the ORM's own
(columns, joins, order, limit), and then runs with the values of each call through ``RawQuerySet``, which maps
the columns to the model's fields and applies the fields' converters as the ORM does::

    _history = KeptRead(lambda gpu_id: GpuStateChange.objects.filter(gpu_id=gpu_id).order_by("-at", "-id")[:100])
    rows = _history(gpu.pk)   # a list of GpuStateChange

What a raw query cannot do, a kept read does not: ``select_related`` objects are not filled (name what the page
shows of a related row with ``annotate()``: the value becomes an attribute), nor are ``prefetch_related``,
``values()`` or ``values_list()`` honoured. Those are refused when the statement is first built. A parameter is
an ``int``, a ``str`` or an aware ``datetime``, and must reach the statement unchanged as one of its parameters.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.db.models import Model, QuerySet
from django.db.models.query import ModelIterable

# Stand-ins for the parameters while the statement is built: values no caller passes.
_INT_BASE = -2_000_000_011
_EPOCH = dt.datetime(1901, 1, 1, tzinfo=dt.UTC)


def _stand_in(position: int, value: Any) -> Any:
    if isinstance(value, bool):
        raise TypeError("a kept read's parameter is an int, a str or an aware datetime, not a bool")
    if isinstance(value, int):
        return _INT_BASE - position
    if isinstance(value, str):
        return f"\x1fkept-parameter-{position}"
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return _EPOCH + dt.timedelta(microseconds=position + 1)
    raise TypeError(f"a kept read's parameter is an int, a str or an aware datetime, not {value!r}")


class KeptRead[M: Model]:
    """``build(*parameters)`` -> a queryset of model instances; calling the read returns its rows as a list."""

    def __init__(self, build: Callable[..., QuerySet[M]]) -> None:
        self._build = build
        # per parameter types: the model, the database, the SQL, and for each SQL parameter either the position
        # of the call's argument it takes or a constant
        self._statements: dict[tuple[type, ...], tuple[type[M], str, str, list[tuple[bool, Any]]]] = {}

    def __call__(self, *args: Any) -> list[M]:
        kinds = tuple(type(a) for a in args)
        statement = self._statements.get(kinds)
        if statement is None:
            statement = self._statements[kinds] = self._prepare(args)
        model, using, sql, slots = statement
        params = [args[value] if is_argument else value for is_argument, value in slots]
        return list(model._default_manager.raw(sql, params, using=using))

    def _prepare(self, args: tuple[Any, ...]) -> tuple[type[M], str, str, list[tuple[bool, Any]]]:
        stand_ins = [_stand_in(i, a) for i, a in enumerate(args)]
        queryset = self._build(*stand_ins)
        if queryset._iterable_class is not ModelIterable:  # noqa: SLF001 - values(), values_list()
            raise TypeError("a kept read returns model instances: no values() or values_list()")
        if queryset.query.select_related or queryset._prefetch_related_lookups:  # noqa: SLF001
            raise TypeError("a kept read fills no related objects: annotate() what the page shows of them")
        sql, params = queryset.query.sql_with_params()
        slots: list[tuple[bool, Any]] = []
        found = [0] * len(args)
        for param in params:
            index = next((i for i, s in enumerate(stand_ins) if type(param) is type(s) and param == s), None)
            if index is None:
                slots.append((False, param))
            else:
                found[index] += 1
                slots.append((True, index))
        if any(n != 1 for n in found):
            raise TypeError(f"each parameter of a kept read must reach its statement once, unchanged: {sql}")
        return queryset.model, queryset.db, sql, slots
