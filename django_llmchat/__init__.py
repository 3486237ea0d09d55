"""django-llmchat: LLM conversations as Django models.

The public face is five modules and one URLconf (:data:`FACE`); the docs import from
nothing else::

    from django_llmchat import Chat, tool, Agent, Context, Tokens
    from django_llmchat.events import TextDelta
    from django_llmchat.errors import ProviderError
    from django_llmchat.testing import FakeProviderServer, Reply
    from django_llmchat.providers import get_provider, ProviderRequest
    path("llm/", include("django_llmchat.api.urls"))

The names below are read lazily (PEP 562): importing the package imports no model, so
``settings.py`` and ``apps.py`` may import it before the app registry is ready. Each name
stays where it is defined too (``django_llmchat.models.Chat``, ``django_llmchat.tools.tool``,
``django_llmchat.context.Context``, ...): the face re-exports them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

FACE = (
    "django_llmchat",
    "django_llmchat.events",
    "django_llmchat.errors",
    "django_llmchat.testing",
    "django_llmchat.providers",
)
"""The modules users import from. ``django_llmchat.api.urls`` is the URLconf to
``include()`` (named as a string, never imported by a project's code)."""

URLCONF = "django_llmchat.api.urls"

# public name -> "module:attribute" (attribute defaults to the name)
_EXPORTS: dict[str, str] = {}


def _export(module: str, *names: str, **aliases: str) -> None:
    for name in names:
        _EXPORTS[name] = f"{module}:{name}"
    for alias, name in aliases.items():
        _EXPORTS[alias] = f"{module}:{name}"


# the rows (RubyLLM's acts_as_*), and their abstract bases for projects owning their tables
_export(
    "django_llmchat.models",
    "Chat",
    "Message",
    "Run",
    "ToolCall",
    "Usage",
    "Attachment",
    "LLMModel",
    "Feedback",
    "Limit",
    "ChatShare",
    "ChatTag",
    "IdempotencyKey",
    "UsageDashboard",
    "AbstractChat",
    "AbstractMessage",
    "AbstractRun",
    "AbstractToolCall",
    "AbstractUsage",
    "AbstractAttachment",
    "AbstractLLMModel",
    "AbstractFeedback",
    "AbstractLimit",
    "AbstractChatShare",
    "AbstractIdempotencyKey",
)
# values, context, tools, agents, guardrails, skills
_export("django_llmchat.values", "Tokens", "Cost", "Thinking", "Citation", "ServerToolCall")
_export("django_llmchat.context", "Context")
_export("django_llmchat.tools", "tool", "Tool", "ToolResult", "abandoned_tool_threads")
_export("django_llmchat.agents", "Agent", "interrupt")
_export("django_llmchat.guardrails", "Guardrail", "GuardrailResult", "guardrail", "screen")
_export("django_llmchat.skills", "load_skills", "SkillsContext")
_export("django_llmchat.mcp", "MCPTools")
_export("django_llmchat.models.branches", BRANCH_ROOT="ROOT")
# settings and checks
_export("django_llmchat.conf", "settings", "on_change")
_export("django_llmchat.checks", "check_settings")
# signals
_export(
    "django_llmchat.signals",
    "budget_warning",
    "budget_exceeded",
    "run_failed",
    "run_lost",
    "run_recovered",
)
# prices, the model registry, history, titles, markdown
_export("django_llmchat.catalog.pricing", "model_pricing", "price", "price_from_table")
_export("django_llmchat.catalog.registry", "find_model", "sync_models")
_export("django_llmchat.loop.history", "estimate_tokens")
_export("django_llmchat.loop.transcript", "load_history", "forget_history", "answered_history")
_export("django_llmchat.chats.titles", "prompt_title")
_export("django_llmchat.chats.markdown", "render_markdown")
# the data: export, import, retention, erasure, shares, dashboard
_export(
    "django_llmchat.chats.export",
    "filter_chats",
    "finetune_lines",
    "transcript_dict",
    "transcripts_json",
)
_export("django_llmchat.chats.imports", "import_data")
_export("django_llmchat.chats.lifecycle", "export_user", "erase_user", "ErasureRefused")
_export("django_llmchat.chats.retention", "apply_retention", retention_due="due")
_export("django_llmchat.chats.shares", "share_chat", "find_share", "revoke_shares")
_export("django_llmchat.chats.dashboard", "usage_summary")
_export(
    "django_llmchat.chats.search_index",
    rebuild_search_index="rebuild_index",
    catch_up_search_index="catch_up",
)
# limits and the input rules
_export(
    "django_llmchat.runs.limits", user_spend="spend", check_limits="admit", forget_spend="forget"
)
_export("django_llmchat.inputs", "check_prompt", "check_attachment", "check_chat", "check_history")
_export("django_llmchat.vendor_options", check_vendor_options="check")
# runs: the gate, the session, the transitions on PostgreSQL
_export(
    "django_llmchat.runs",
    "double_texting",
    "stale_runs",
    enqueue_run="enqueue",
    run_opens_attempt="opens_attempt",
    RunExecution="Execution",
)
_export("django_llmchat.runs.pg", run_functions_installed="available")
_export("django_llmchat.loop.session", "RunSession")
# events across processes (Redis Streams)
_export(
    "django_llmchat.streams",
    "FollowFailed",
    follow_events="follow",
    last_event_id="last_id",
    publish_event="publish",
    redis_client="client",
    event_stream_key="stream_key",
    delete_event_streams="delete",
)
# the admin's helpers and the API's schema pieces
_export(
    "django_llmchat.admin",
    "build_transcript",
    "transcript_page",
    "LLMModelForm",
    "erase_llmchat_data",
    "export_llmchat_data",
)
_export("django_llmchat.api.schema", "TOOL_NAME_PATTERN")
_export("django_llmchat.api.schema_settings", "SCHEMA_SETTINGS")

# need the optional REST layer (the "api" extra: DRF, drf-spectacular): importable, but
# left out of ``from django_llmchat import *``
_OPTIONAL = frozenset({"TOOL_NAME_PATTERN", "SCHEMA_SETTINGS"})

__all__ = sorted(set(_EXPORTS) - _OPTIONAL)


_FACE_MODULES = tuple(module.rpartition(".")[2] for module in FACE[1:])


def __getattr__(name: str) -> Any:
    if name in _FACE_MODULES:  # django_llmchat.events.TextDelta after `import django_llmchat`
        return importlib.import_module(f"{__name__}.{name}")
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'django_llmchat' has no attribute {name!r}")
    module, _, attribute = target.partition(":")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # read once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_FACE_MODULES})
