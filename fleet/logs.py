"""Logging: plain text (the default) or, with ``LOG_FORMAT=json``, one JSON object per line carrying the
request id of the request that wrote it (``fleet.observability.RequestMiddleware`` sets it).

Settings import this module, so it imports no models.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

from fleet.request_context import current_request_id


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (empty outside a request) to every log record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = current_request_id()
        return True


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "request_id"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, the record's extra fields and,
    for an exception, its traceback as one string."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "") or current_request_id(),
        }
        entry.update({key: value for key, value in vars(record).items()
                      if key not in _STANDARD and not key.startswith("_")})
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def logging_config(*, fmt: str, level: str) -> dict[str, Any]:
    """``LOGGING`` for settings: plain text (the default) or ``json``; the request log only in json
    (plain text keeps gunicorn's access log)."""
    json_format = fmt == "json"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": "fleet.logs.RequestIdFilter"}},
        "formatters": {"json": {"()": "fleet.logs.JsonFormatter"},
                       "plain": {"format": "%(message)s"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["request_id"],
                                 "formatter": "json" if json_format else "plain"}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {"fleet.request": {"level": "INFO" if json_format else "WARNING"}},
    }
