"""Markdown of messages, rendered to sanitized HTML for the admin (and any template).

:func:`render_markdown` parses with markdown-it-py (CommonMark, plus tables and
strikethrough), raw HTML off: a ``<script>`` in a reply is shown as text. The result then
goes through nh3 (the Ammonia sanitizer) with a short list of tags and attributes and only
``http``, ``https`` and ``mailto`` links, so nothing in it runs, whatever the parser let
through. Links get ``rel="noopener noreferrer nofollow"``; images are dropped (a reply
must not make the page fetch an address of its choosing).
"""

from __future__ import annotations

from functools import cache

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

__all__ = ["ALLOWED_TAGS", "render_markdown"]

ALLOWED_TAGS = frozenset(
    {
        "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote",
        "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
        "table", "thead", "tbody", "tr", "th", "td",
    }
)  # fmt: skip
"""The HTML tags the rendered markdown may contain; anything else is dropped."""

_ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},
    "th": {"style"},
    "td": {"style"},
    "ol": {"start"},
}


@cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"]
    )


def render_markdown(text: str | None) -> SafeString:
    """``text`` as markdown, rendered to HTML that is safe to insert into a page."""
    if not text:
        return mark_safe("")
    html = _parser().render(text)
    clean = nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        attributes={tag: set(names) for tag, names in _ATTRIBUTES.items()},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        filter_style_properties={"text-align"},
    )
    return mark_safe(clean)  # noqa: S308 (sanitized by nh3 just above)
