"""The chat page: one server-rendered page; its JavaScript talks to the REST API."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from django_llmchat.models import LLMModel

API_ROOT = "/api/"


def _providers() -> list[dict[str, object]]:
    """The providers the page offers, the default first, each with model suggestions."""
    offered = dict(settings.EXAMPLE_PROVIDERS)
    default = settings.LLMCHAT["DEFAULT_PROVIDER"]
    names = [default] + [name for name in offered if name != default]
    known: dict[str, list[str]] = {}
    rows = LLMModel.objects.filter(provider__in=names).order_by("model_id")
    for provider, model_id in rows.values_list("provider", "model_id"):
        known.setdefault(provider, []).append(model_id)
    out = []
    for name in names:
        model = settings.LLMCHAT["DEFAULT_MODEL"] if name == default else offered[name]
        models = [model] + [m for m in known.get(name, []) if m != model]
        out.append({"name": name, "model": model, "models": models[:200]})
    return out


@login_required
@ensure_csrf_cookie
def chat_page(request):
    demo = settings.LLMCHAT["DEFAULT_PROVIDER"] == "demo"
    return render(
        request,
        "chat/index.html",
        {
            "demo_mode": demo,
            "page_config": {
                "apiRoot": API_ROOT,
                "providers": _providers(),
                "demoTools": ["demo_weather", "demo_clock", "demo_book_table"],
                "adminChangeUrl": "/admin/django_llmchat/chat/{id}/change/",
            },
        },
    )
