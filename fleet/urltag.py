"""``{% url %}`` with the URLs that take no arguments kept per process (a template builtin, ``fleet/settings.py``).

The navigation bar alone reverses ~15 URL names on every page; each ``reverse()`` walks the resolver's
candidates and quotes the result (~40 us): ~0.8 ms of CPU per page. A URL without arguments depends only on
its name, the current application namespace, the URLconf and the script prefix, so it is kept under those.
Everything else (arguments, ``as var``, a name that does not reverse) is Django's own tag, unchanged.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.template.defaulttags import URLNode
from django.template.defaulttags import url as django_url
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.html import conditional_escape

register = template.Library()
_KEPT = 2048
_urls: dict[tuple[Any, ...], str] = {}


class KeptURLNode(URLNode):
    def render(self, context: template.Context) -> str:
        if self.args or self.kwargs or self.asvar:
            return super().render(context)
        view_name = self.view_name.resolve(context)
        request = getattr(context, "request", None)
        current_app = getattr(request, "current_app", None)
        if current_app is None:
            current_app = getattr(getattr(request, "resolver_match", None), "namespace", None)
        key = (view_name, current_app, get_urlconf(), get_script_prefix())
        url = _urls.get(key)
        if url is None:
            url = reverse(view_name, current_app=current_app)  # NoReverseMatch as in Django's tag; nothing kept
            if len(_urls) >= _KEPT:
                _urls.clear()
            _urls[key] = url
        return conditional_escape(url) if context.autoescape else url


@register.tag
def url(parser: template.base.Parser, token: template.base.Token) -> URLNode:
    node = django_url(parser, token)
    return KeptURLNode(node.view_name, node.args, node.kwargs, node.asvar)
