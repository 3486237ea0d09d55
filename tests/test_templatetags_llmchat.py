"""The template filters (``templatetags/llmchat.py``): ``{% load llmchat %}`` and
``|markdown`` render a reply as sanitized HTML, ``None`` as nothing."""

from __future__ import annotations

from django.template import Context, Template
from django.utils.safestring import SafeString

from django_llmchat.chats.markdown import render_markdown
from django_llmchat.templatetags.llmchat import markdown


def _render(text):
    return Template("{% load llmchat %}{{ text|markdown }}").render(Context({"text": text}))


def test_the_filter_renders_markdown_safely():
    html = _render("**bold** <script>alert(1)</script> [x](javascript:alert(1))")
    assert "<strong>bold</strong>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "href" not in html  # a javascript: link is not made a link
    assert html == render_markdown("**bold** <script>alert(1)</script> [x](javascript:alert(1))")


def test_the_filter_is_the_markdown_function_marked_safe():
    assert isinstance(markdown("# T"), SafeString) and "<h1>T</h1>" in markdown("# T")
    assert _render(None) == "" and _render("") == ""
