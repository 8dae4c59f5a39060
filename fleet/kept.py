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
shows of a related row with ``annotate()``: the value becomes an attribute, converted as the ORM converts it),
nor are ``prefetch_related``, ``values()`` or ``values_list()`` honoured. Those are refused when the statement is
first built. A parameter is an ``int``, a ``str`` or an aware ``datetime``, and must reach the statement as one
of its parameters, unchanged (a datetime may be adapted to the database: SQLite takes it as text).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.query import ModelIterable

# Stand-ins for the parameters while the statement is built: values no caller passes.
_INT_BASE = -2_000_000_011
_EPOCH = dt.datetime(1901, 1, 1, tzinfo=dt.UTC)

# A statement parameter: (the position of the call's argument, what makes the parameter of it), or (None, constant)
_Slot = tuple[int | None, Any]
# The model, the database, the SQL, its parameters, and the converters of its annotations (name, expression, them)
_Statement = tuple[type[Model], str, str, list[_Slot], list[tuple[str, Any, list[Callable[..., Any]]]]]


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
        self._statements: dict[tuple[type, ...], _Statement] = {}  # per parameter types

    def __call__(self, *args: Any) -> list[M]:
        kinds = tuple(type(a) for a in args)
        statement = self._statements.get(kinds)
        if statement is None:
            statement = self._statements[kinds] = self._prepare(args)
        model, using, sql, slots, converters = statement
        params = [value if index is None else value(args[index]) for index, value in slots]
        rows = list(model._default_manager.raw(sql, params, using=using))
        if converters and rows:
            connection = connections[using]
            for row in rows:
                for name, expression, functions in converters:
                    value = getattr(row, name)
                    for convert in functions:
                        value = convert(value, expression, connection)
                    setattr(row, name, value)
        return rows

    def _prepare(self, args: tuple[Any, ...]) -> _Statement:
        stand_ins = [_stand_in(i, a) for i, a in enumerate(args)]
        queryset = self._build(*stand_ins)
        if queryset._iterable_class is not ModelIterable:  # noqa: SLF001 - values(), values_list()
            raise TypeError("a kept read returns model instances: no values() or values_list()")
        if queryset.query.select_related or queryset._prefetch_related_lookups:  # noqa: SLF001
            raise TypeError("a kept read fills no related objects: annotate() what the page shows of them")
        compiler = queryset.query.get_compiler(using=queryset.db)
        sql, params = compiler.as_sql()
        # RawQuerySet converts the model's columns; an annotation's value is converted here as the ORM would
        # (a datetime from SQLite's text, a JSON document).
        converters = []
        for expression, _, name in compiler.select:
            if name in queryset.query.annotation_select:
                functions = compiler.get_converters([expression])
                if functions:
                    converters.append((name, expression, functions[0][0]))
        # How each parameter reaches the statement: as given, or (a datetime, on SQLite) as the database takes it.
        ops = connections[queryset.db].ops
        forms: list[tuple[int, Any, Callable[[Any], Any]]] = []
        for i, stand_in in enumerate(stand_ins):
            forms.append((i, stand_in, _as_given))
            if isinstance(stand_in, dt.datetime):
                forms.append((i, ops.adapt_datetimefield_value(stand_in), ops.adapt_datetimefield_value))
        slots: list[_Slot] = []
        found = [0] * len(args)
        for param in params:
            form = next(((i, make) for i, value, make in forms if type(param) is type(value) and param == value),
                        None)
            if form is None:
                slots.append((None, param))
            else:
                found[form[0]] += 1
                slots.append(form)
        if any(n != 1 for n in found):
            raise TypeError(f"each parameter of a kept read must reach its statement once, unchanged: {sql}")
        return queryset.model, queryset.db, sql, slots, converters


def _as_given(value: Any) -> Any:
    return value
