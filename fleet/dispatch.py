"""The one seam through which Fleet sends Celery tasks: by name, so the sender never imports the task module.

Services call ``dispatch.send("app.tasks.name", *args)`` (or ``send_on_commit`` inside a transaction). Sending
by name keeps imports one way (a service does not import its app's ``tasks.py``, which imports the service),
and gives tests one place to patch: ``monkeypatch.setattr(dispatch, "send", fake)`` captures every message.

A broker that is down is not an error for the caller: the message is logged as not sent and ``send`` returns
False. Every caller has its own way back (a lease that runs out, a stall watchdog, the next beat tick), which
is why nothing here retries.

With ``CELERY_TASK_ALWAYS_EAGER`` the task runs here and now, as ``.delay()`` would run it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)


def send(name: str, *args: Any, **kwargs: Any) -> bool:
    """Send task ``name`` with these arguments. True when the broker took the message (or an eager run ended)."""
    from fleet.celery import app

    try:
        if app.conf.task_always_eager:
            if name not in app.tasks:
                app.loader.import_default_modules()  # autodiscovery is lazy outside a worker
            app.tasks[name].apply(args=args, kwargs=kwargs, throw=True)
        else:
            app.send_task(name, args=args, kwargs=kwargs)
    except Exception:  # noqa: BLE001 - kombu raises many kinds when the broker is away
        if app.conf.task_always_eager:
            raise
        logger.warning("dispatch: could not send %s (broker unreachable?); its caller's watchdog sends it again",
                       name, exc_info=True)
        return False
    return True


def send_on_commit(name: str, *args: Any, **kwargs: Any) -> None:
    """Send task ``name`` when the current transaction commits (at once outside a transaction)."""
    transaction.on_commit(lambda: send(name, *args, **kwargs))
