"""Reads that run on every view of a page, with the SQL the ORM writes for them kept per process.

Django compiles a queryset to SQL every time it is evaluated. For a read of one object's rows by an indexed
column (a GPU's state history, its audit trail) the compiling is most of the read's CPU: the history read cost
~0.45-0.55 ms as a queryset, ~0.13 ms as the same statement through ``RawQuerySet``, ~0.06 ms as a kept read;
the GPU page's read of its GPU with eleven related models 1.6 ms, ~0.3 ms kept (bench/README.md, the GPU page;
measured in one process with other work on the machine: compare the figures, not their size).

A kept read is built once from its queryset with stand-in values for its parameters, so the statement is the
ORM's own (columns, joins, order, limit), and the layout of its rows is taken from the ORM's compiler then: which
columns are the model's fields, which the related models' (``select_related``), which the annotations, and the
converters the ORM applies (a JSON document, a datetime on SQLite). Each call runs the statement with its values
and makes the instances as the ORM's ``ModelIterable`` does (``Model.from_db``, the related populators)::

    _history = KeptRead(lambda gpu_id: GpuStateChange.objects.filter(gpu_id=gpu_id).order_by("-at", "-id")[:100])
    rows = _history(gpu.pk)   # a list of GpuStateChange

``prefetch_related()``, ``extra()``, ``values()``, ``values_list()`` and a fetch mode other than the default are
refused when the statement is built. A parameter is an ``int``, a ``str`` or an aware ``datetime``, and must
reach the statement as one of its parameters, unchanged (a datetime may be adapted to the database: SQLite takes
it as text).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.query import ModelIterable, get_related_populators

# Stand-ins for the parameters while the statement is built: values no caller passes.
_INT_BASE = -2_000_000_011
_EPOCH = dt.datetime(1901, 1, 1, tzinfo=dt.UTC)

# A statement parameter: (the position of the call's argument, what makes the parameter of it), or (None, constant)
_Slot = tuple[int | None, Any]


@dataclass(frozen=True)
class _Statement:
    model: type[Model]
    using: str  # the database
    sql: str
    slots: list[_Slot]  # its parameters
    fields: tuple[int, int]  # the model's columns in a row: [start, end)
    names: list[str]  # their fields' attnames
    annotations: list[tuple[str, int]]  # (attribute, column)
    converters: list[tuple[int, list[Callable[..., Any]], Any]]  # (column, converters, expression)
    klass_info: dict[str, Any]  # the compiler's layout of the models in a row, for the related populators
    select: list[Any]
    fetch_mode: Any
    related: bool  # select_related models to fill


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
        params = [value if index is None else value(args[index]) for index, value in statement.slots]
        connection = connections[statement.using]
        with connection.cursor() as cursor:
            cursor.execute(statement.sql, params)
            rows = cursor.fetchall()
        instances = []
        start, end = statement.fields
        # select_related objects, filled as ModelIterable fills them (a populator per related model, made per call)
        populators = get_related_populators(statement.klass_info, statement.select, statement.using,
                                            statement.fetch_mode) if statement.related else []
        for row in rows:
            if statement.converters:
                row = list(row)
                for position, functions, expression in statement.converters:
                    value = row[position]
                    for convert in functions:
                        value = convert(value, expression, connection)
                    row[position] = value
            instance = statement.model.from_db(statement.using, statement.names, row[start:end],
                                               fetch_mode=statement.fetch_mode)
            for populator in populators:
                populator.populate(row, instance)
            for name, position in statement.annotations:
                setattr(instance, name, row[position])
            instances.append(instance)
        return instances

    def _prepare(self, args: tuple[Any, ...]) -> _Statement:
        stand_ins = [_stand_in(i, a) for i, a in enumerate(args)]
        queryset = self._build(*stand_ins)
        query = queryset.query
        if queryset._iterable_class is not ModelIterable:  # noqa: SLF001 - values(), values_list()
            raise TypeError("a kept read returns model instances: no values() or values_list()")
        if queryset._prefetch_related_lookups or query.extra_select:  # noqa: SLF001
            raise TypeError("a kept read runs one statement: no prefetch_related() or extra()")
        fetch_mode = queryset._fetch_mode  # noqa: SLF001
        if fetch_mode.track_peers:
            raise TypeError("a kept read fetches in the default mode: no fetch_mode(FETCH_PEERS)")
        compiler = query.get_compiler(using=queryset.db)
        sql, params = compiler.as_sql()
        # The layout ModelIterable reads each row by: the model's columns, the related models' (select_related),
        # the annotations; the converters the ORM applies (JSON documents, SQLite's datetimes), by column.
        select_fields = compiler.klass_info["select_fields"]
        fields = (select_fields[0], select_fields[-1] + 1)
        names = [column[0].target.attname for column in compiler.select[fields[0]:fields[1]]]
        converters = [(position, functions, expression) for position, (functions, expression) in
                      compiler.get_converters([column[0] for column in compiler.select]).items()]
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
        return _Statement(model=queryset.model, using=queryset.db, sql=sql, slots=slots, fields=fields,
                          names=names, annotations=list(compiler.annotation_col_map.items()), converters=converters,
                          klass_info=compiler.klass_info, select=compiler.select, fetch_mode=fetch_mode,
                          related=bool(compiler.klass_info.get("related_klass_infos")))


def _as_given(value: Any) -> Any:
    return value
