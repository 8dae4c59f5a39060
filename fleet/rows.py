"""Model instances from a fixed SQL statement, for the few reads on every request's path.

The ORM compiles a query anew on each call: for the API token lookup with its user that was ~1.5 ms of CPU,
against ~0.3 ms for the same statement written once (bench/README.md, "Load benchmark"). :class:`ModelColumns`
gives a model's columns for a SELECT under a table alias and turns the matching slice of a result row back into
an instance, with the database backend's and the fields' converters applied as the ORM applies them (SQLite
returns datetimes as text and booleans as integers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper


class ModelColumns[M: models.Model]:
    """The concrete fields of ``model`` under the SQL table alias ``alias``."""

    def __init__(self, model: type[M], alias: str) -> None:
        self.model, self.alias = model, alias
        self.fields = list(model._meta.concrete_fields)
        self.names = [field.attname for field in self.fields]
        self._converters: dict[str, list[tuple[int, list[Any], Any]]] = {}

    def __len__(self) -> int:
        return len(self.fields)

    def select(self, connection: BaseDatabaseWrapper) -> str:
        quote = connection.ops.quote_name
        return ", ".join(f"{self.alias}.{quote(field.column)}" for field in self.fields)

    def _converters_for(self, connection: BaseDatabaseWrapper) -> list[tuple[int, list[Any], Any]]:
        converters = self._converters.get(connection.vendor)
        if converters is None:
            converters = []
            for i, field in enumerate(self.fields):
                column = field.get_col(self.alias)
                functions = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
                if functions:
                    converters.append((i, functions, column))
            self._converters[connection.vendor] = converters
        return converters

    def instance(self, connection: BaseDatabaseWrapper, values: Sequence[Any]) -> M:
        """The instance read from ``values`` (this model's columns, in :meth:`select`'s order)."""
        row = list(values)
        for i, functions, column in self._converters_for(connection):
            for convert in functions:
                row[i] = convert(row[i], column, connection)
        return self.model.from_db(connection.alias, self.names, row)
