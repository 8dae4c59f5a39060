"""Table bodies rendered by Jinja2: the hot lists' rows (50 per page, ~20 values each).

The Django template engine resolves every ``{{ value }}`` through its generic lookup chain, about 4 us
each: ~3.5 ms of a GPU list page went to its rows. Jinja2 compiles a template to Python and renders the same
rows in ~0.4 ms (bench/README.md). A fragment is a file under ``templates/`` ending in ``.jinja``,
autoescaped like every Django template; the page includes the result as ``{{ rows_html }}``.
"""

from __future__ import annotations

from typing import Any

import jinja2
from django.conf import settings
from django.utils.safestring import SafeString, mark_safe

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader([str(d) for d in settings.TEMPLATES[0]["DIRS"]]),
    autoescape=True, auto_reload=settings.DEBUG, undefined=jinja2.StrictUndefined,
    trim_blocks=True, lstrip_blocks=True,
)


def fragment(name: str, context: dict[str, Any]) -> SafeString:
    """Render ``templates/<name>`` (a Jinja2 file) with ``context``; safe to put in a Django template."""
    return mark_safe(_env.get_template(name).render(context))  # noqa: S308 - autoescaped by Jinja2
