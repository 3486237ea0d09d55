"""Settings: one ``LLMCHAT`` dict in the project's settings, read through ``settings``.

``from django_llmchat.conf import settings`` then ``settings.MAX_STEPS``. Values are
re-read when ``override_settings`` changes ``LLMCHAT``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    # Provider and model a new Chat uses when none is given.
    "DEFAULT_PROVIDER": "openai",
    "DEFAULT_MODEL": "gpt-4.1-mini",
    # Per provider name: {"api_key", "base_url", "timeout", "max_retries", ...}.
    "PROVIDERS": {},
    # The agent loop stops after this many provider responses in one run.
    "MAX_STEPS": 16,
    # Seconds a tool may run before it gets a timeout_error result.
    "TOOL_TIMEOUT": 60.0,
    # The longest text of a tool's result, in characters: a longer one is cut, marked for
    # the model and on the tool message (``raw["truncated"]``). A tool's files pass the
    # rules of a user's upload (MAX_ATTACHMENTS, MAX_ATTACHMENT_SIZE,
    # ALLOWED_ATTACHMENT_TYPES).
    "TOOL_RESULT_MAX_CHARS": 100_000,
    # Dotted paths of modules whose @tool functions should be importable by name.
    "TOOL_MODULES": [],
    # MCP servers whose tools chats and agents may take ("mcp:<name>"), by name: {"<name>":
    # {"url": ... | "command": [...] | "server": ..., "headers"/"env": dict or callable,
    # "tools", "prefix", "requires_approval", "timeout", "list_timeout", "cache_ttl",
    # "concurrent"}} (see docs/mcp.md). Needs the [mcp] extra.
    "MCP_SERVERS": {},
    # Retries of a provider call on retryable errors, and the longest wait honoured (s).
    "MAX_RETRIES": 2,
    "MAX_RETRY_WAIT": 60.0,
    # Model fallback (see docs/runs.md): {"<model id>": ["<model id>", ...]}, the models a
    # provider call moves on to, in order, when its model keeps failing with a retryable
    # error after its MAX_RETRIES; "provider/model_id" names another provider's model.
    # None (or {}): no fallback.
    "FALLBACKS": None,
    # Redis URL for event fan-out to other processes (None: no fan-out).
    "EVENTS_URL": None,
    # True: EVENTS_URL names a node of a Redis Cluster (redis-py's RedisCluster); every
    # command touches one chat's key, so the streams spread over the cluster's slots.
    "EVENTS_CLUSTER": False,
    "EVENTS_MAXLEN": 10_000,
    "EVENTS_TTL": 24 * 3600,
    # Prefix of the Redis keys of the event streams (``<prefix>:chat:<id>:events``).
    "EVENTS_KEY_PREFIX": "llmchat",
    # Seconds a publish to Redis may take; past it (or on any Redis error) publishing is
    # skipped for 10 s, so a hung Redis never stalls a reply.
    "EVENTS_PUBLISH_TIMEOUT": 1.0,
    # Seconds between keep-alive comments of an SSE follower (events/) while nothing
    # happens, and while Redis does not answer (until it gave up, after 10 s).
    "EVENTS_HEARTBEAT": 3.0,
    # Run tasks in-process when no Celery broker is configured: True runs them in a
    # background thread, "inline" in the thread that committed the prompt.
    "TASKS_EAGER_WITHOUT_BROKER": True,
    # Retries of the whole task on a retryable provider error (after the provider's own
    # MAX_RETRIES), and the longest wait between two, in seconds (Retry-After is honoured
    # up to it).
    "TASK_MAX_RETRIES": 3,
    "TASK_RETRY_MAX_WAIT": 300.0,
    # Runs (django_llmchat.runs). A process working on a run renews its lease every third
    # of RUN_LEASE seconds; a run whose lease ran out (its process died) is resumed from
    # its last stored step by the next task, the periodic llmchat recovery or
    # ``manage.py llmchat_recover``. A run taken on RUN_MAX_ATTEMPTS times ends failed.
    "RUN_LEASE": 30.0,
    "RUN_MAX_ATTEMPTS": 8,
    # PostgreSQL: the admission of a run its own process answers right after (ask,
    # stream, an inline reply of the API) commits without waiting for the disk (the run's
    # end, committed synchronously, makes it durable with it); True: it waits, as every
    # other commit of the package does.
    "ADMISSION_SYNCHRONOUS_COMMIT": False,
    # A queued run whose task never came (a lost broker message) is sent again by the
    # recovery after this many seconds.
    "RECOVER_QUEUED_AFTER": 300.0,
    # How long (seconds) an ``Idempotency-Key`` of the API is remembered: a retry with it
    # within this window gets the first request's outcome; older keys are ignored and
    # purged by the periodic recovery (and ``manage.py llmchat_recover``).
    "IDEMPOTENCY_TTL": 86400.0,
    # OpenTelemetry spans (GenAI semantic conventions) of runs, provider attempts and tool
    # runs, on the global tracer provider (needs the extra [otel]); content (messages, tool
    # arguments and results) only with OPENTELEMETRY_CONTENT.
    "OPENTELEMETRY": False,
    "OPENTELEMETRY_CONTENT": False,
    # A client that disconnects from an inline SSE reply: False (default) lets the run
    # finish and be stored; True cancels it (its usage row is kept either way).
    "CANCEL_ON_DISCONNECT": False,
    # What of a transcript each request sends (see docs/history.md): "window" drops the
    # oldest turns until the request fits the model's context window, "summarize" stores
    # a summary of them instead, "all" sends everything, a dotted path names a history
    # processor; or a dict of history options with "strategy". A chat's or an agent's
    # ``history`` overrides it.
    "HISTORY": "window",
    # What a new prompt does while a run of its chat is queued or working (see
    # docs/runs.md): "enqueue" (answered after it), "reject" (refused), "interrupt" (the
    # live run stops, its partial reply kept) or "rollback" (the live run stops, its
    # partial reply and steps deleted). A chat's ``double_texting`` overrides it.
    "DOUBLE_TEXTING": "enqueue",
    # History processors and token estimators by name: {"<name>": "<dotted path>"} (or the
    # function itself). A chat's history set through the API names a strategy or an
    # estimator only by one of these names (or a built-in strategy), never by a dotted
    # path; settings, agents and Python code may use either.
    "HISTORY_PROCESSORS": {},
    "TOKEN_ESTIMATORS": {},
    # Spending limits per user (django_llmchat.runs.limits): None turns them off; else
    # {"default": {"usd_per_day": "2.00", "usd_per_month": ..., "tokens_per_day": ...,
    # "runs_per_hour": ..., "concurrent_runs": ..., "soft": "0.8"}}. Limit rows (admin)
    # override it per user; LIMITS_FOR (a callable or dotted path, user -> dict) per group
    # or tenant, between the two.
    "LIMITS": None,
    "LIMITS_FOR": None,
    # Retention of transcripts (django_llmchat.chats.retention): None keeps them for ever; else
    # {"days": 90, "action": "delete" | "anonymise"}: a chat whose last change is older
    # than that is deleted or emptied by the periodic task
    # django_llmchat.tasks.apply_retention (or ``manage.py llmchat_retention``); its usage
    # rows stay. ``chat.retention_days`` overrides the days per chat; RETENTION_FOR (a
    # callable or dotted path, user -> {"days", "action"} or None) per user.
    "RETENTION": None,
    "RETENTION_FOR": None,
    # Redaction (see docs/privacy.md): a callable or its dotted path, ``redact(text, *,
    # field, chat=None) -> str``, applied at the egress to every text a request sends
    # (messages, tool arguments and results, text attachments) on every wire protocol;
    # REDACT_STORED also applies it before messages and tool calls are stored.
    "REDACT": None,
    "REDACT_STORED": False,
    # Full-text search (django_llmchat.chats.search): {"language": "english"}, the PostgreSQL
    # text search configuration the message index is built with (read when migration 0018
    # runs) and searches are parsed with. None: the default, "english".
    "SEARCH": None,
    # Chat titles (django_llmchat.chats.titles): an untitled chat gets one after its first reply.
    # True: from the first prompt (no provider call); a model id (on the chat's provider)
    # or {"model": ..., "provider": ..., "prompt": ...}: that model writes it (its own
    # usage row, operation "title"; the prompt's title when it fails); False/None: off.
    # A title the user set (title_source "user") is never replaced.
    "TITLES": True,
    # Encryption at rest (needs the extra [encryption]): Fernet keys, the first encrypts,
    # every one decrypts (rotation; ``manage.py llmchat_rotate_keys`` re-encrypts with the
    # first). Message content, reasoning and raw vendor bodies and tool call arguments are
    # stored encrypted; [] stores them in plain text (encrypted rows still need their key).
    "ENCRYPTION_KEYS": [],
    # REST API: the models the API accepts (None: any model of a configured provider),
    # as "provider/model_id" or "provider/*".
    "ALLOWED_MODELS": None,
    # REST API: POST auth/token/ is throttled per username it is sent (case-folded) and
    # per client address, failed and successful attempts alike: "<n>/<second|minute|hour|
    # day>" each, None turns one off (the whole setting None: both). A key left out keeps
    # its default. The client address is REMOTE_ADDR, or with REST_FRAMEWORK["NUM_PROXIES"]
    # set, the one that many proxies put in X-Forwarded-For.
    "TOKEN_THROTTLE_RATES": {"username": "20/hour", "address": "100/hour"},
    # REST API.
    "STAFF_SEES_ALL_CHATS": False,
    "MAX_CONTENT_LENGTH": 100_000,
    "MAX_ATTACHMENTS": 10,
    "MAX_ATTACHMENT_SIZE": 20 * 1024 * 1024,
    "ALLOWED_ATTACHMENT_TYPES": [
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "application/pdf",
        "text/plain",
    ],
}


class LLMChatSettings:
    """Attribute access to ``LLMCHAT`` merged over :data:`DEFAULTS`."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] | None = None
        self._lock = threading.Lock()

    @property
    def user_settings(self) -> dict[str, Any]:
        value = getattr(django_settings, "LLMCHAT", None)
        return value if isinstance(value, dict) else {}

    def _merged(self) -> dict[str, Any]:
        if self._cache is None:
            self._cache = {**DEFAULTS, **self.user_settings}
        return self._cache

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in DEFAULTS:
            raise AttributeError(f"LLMCHAT has no setting {name!r}")
        # kept on the instance: the next read is a plain attribute's, until reload()
        with self._lock:
            value = self.__dict__[name] = self._merged()[name]
        return value

    def reload(self) -> None:
        with self._lock:
            for name in DEFAULTS:
                self.__dict__.pop(name, None)
            self._cache = None


settings = LLMChatSettings()


def on_change(forget: Callable[[], Any]) -> None:
    """Call ``forget()`` each time ``LLMCHAT`` changes (``override_settings``): for what
    is built from the settings and cached."""

    def receiver(*, setting: str, **kwargs: Any) -> None:
        if setting == "LLMCHAT":
            forget()

    setting_changed.connect(receiver, weak=False)


on_change(settings.reload)
