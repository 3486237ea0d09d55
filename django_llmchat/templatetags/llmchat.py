"""Template filters of django_llmchat: ``{% load llmchat %}``."""

from __future__ import annotations

from django import template

from ..chats.markdown import render_markdown

register = template.Library()


@register.filter(name="markdown")
def markdown(text: str | None):
    """A message's markdown as sanitized HTML (see
    :func:`~django_llmchat.chats.markdown.render_markdown`)."""
    return render_markdown(text)
