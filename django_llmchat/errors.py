"""The exception tree. Everything raised on purpose derives from :class:`LLMChatError`.

Provider errors are picklable (Celery ships exceptions between processes) and their
text names the provider but never contains a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class LLMChatError(Exception):
    """Root of every error raised by django-llmchat."""


class ArgumentError(LLMChatError, ValueError):
    """A caller passed a value the API does not accept."""


class InputError(ArgumentError):
    """Input from an API user that :mod:`django_llmchat.inputs` refuses: ``field`` names
    what was sent (``content``, ``attachments``, ``history.estimator``...), ``reasons``
    say what is wrong with it (``reason`` is the first). The REST API answers it with a
    400 ``{field: reasons}``."""

    def __init__(self, field: str, reason: str, *more: str):
        self.field = field
        self.reasons = (reason, *more)
        super().__init__(f"{field}: {'; '.join(self.reasons)}")

    @property
    def reason(self) -> str:
        return self.reasons[0]

    def to_dict(self) -> dict[str, list[str]]:
        """The 400 body: ``{field: [reason, ...]}``."""
        return {self.field: list(self.reasons)}

    def __reduce__(self):
        return (type(self), (self.field, *self.reasons))


class ConfigurationError(LLMChatError):
    """A provider or model is not configured (missing key, unknown provider name)."""


class UnsupportedFeatureError(LLMChatError):
    """The provider cannot do what was asked (structured output, thinking, a modality)."""

    def __init__(self, provider: str, feature: str):
        self.provider = provider
        self.feature = feature
        super().__init__(f"{provider} does not support {feature}")

    def __reduce__(self):
        return (type(self), (self.provider, self.feature))


class ProviderError(LLMChatError):
    """The provider answered with an error (HTTP status or an error event in a stream).

    ``status`` is the HTTP status (``None`` for a mid-stream error event), ``body`` the
    error payload as text, ``headers`` the response headers (lower-cased, no secrets),
    ``retry_after`` the server's wait hint in seconds.
    """

    retryable_statuses = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
    default_retryable: bool | None = None
    """Whether an error of this class is retried when the caller does not say (``None``:
    by its HTTP status)."""

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        status: int | None = None,
        body: str | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
        code: str | None = None,
    ):
        self.message = message
        self.provider = provider
        self.status = status
        self.body = body
        self.headers = dict(headers or {})
        self.retry_after = retry_after
        self.code = code
        if retryable is None:
            retryable = self.default_retryable
        if retryable is None:
            retryable = status in self.retryable_statuses if status is not None else False
        self.retryable = retryable
        super().__init__(message)

    def __str__(self) -> str:
        prefix = f"{self.provider}: " if self.provider else ""
        status = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{prefix}{self.message}{status}"

    def _attributes(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "status": self.status,
            "body": self.body,
            "headers": self.headers,
            "retry_after": self.retry_after,
            "retryable": self.retryable,
            "code": self.code,
        }

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self._attributes()))


def _rebuild(cls: type[ProviderError], message: str, state: dict[str, Any]) -> ProviderError:
    return cls(message, **state)


class AuthenticationError(ProviderError):
    """401 or 403: the key is missing, wrong or lacks permission."""

    default_retryable = False


class RateLimitError(ProviderError):
    """429: too many requests. ``retry_after`` holds the provider's hint when it gave one."""

    default_retryable = True


class ContextLengthExceededError(ProviderError):
    """The prompt does not fit in the model's context window."""

    default_retryable = False


class OverloadedError(ProviderError):
    """The provider is overloaded (Anthropic 529 / ``overloaded_error``)."""

    default_retryable = True


class ProviderTimeoutError(ProviderError):
    """The provider did not answer in time, or the connection failed."""

    default_retryable = True


class IncompleteStreamError(ProviderError):
    """A stream ended before the provider's terminal event.

    Events already yielded were delivered; nothing from the failed step is stored.
    """

    default_retryable = True

    def __init__(self, message: str = "stream ended before its terminal event", **kw: Any):
        super().__init__(message, **kw)


class StructuredOutputError(LLMChatError, ValueError):
    """A reply that should be JSON for a schema is not valid JSON."""


class InterruptError(LLMChatError):
    """Raised inside a tool or callback by :func:`django_llmchat.interrupt` to stop the loop."""

    def __init__(self, reason: str | None = None):
        self.reason = reason
        super().__init__(reason or "interrupted")

    def __reduce__(self):
        return (type(self), (self.reason,))


class ChatBusyError(LLMChatError):
    """The chat cannot take this run now: its current run waits for a tool-call decision
    (approve or deny it, or cancel the run, first)."""


class RunInProgress(ChatBusyError):
    """A regenerate, a branch or a switch of branches while a run of the chat is queued,
    running or waiting for a tool-call decision: the path does not move under a run."""


class DoubleTextingRejected(ChatBusyError):
    """A new prompt refused by the ``reject`` double-texting policy: a run of the chat is
    queued or working (nothing of the prompt is stored). REST and ``ui/chat`` answer 409
    with ``{"code": "double_texting_rejected"}``."""


class RunLostError(LLMChatError):
    """This process no longer owns the run: another one took it over (its lease ran out)
    or it was finished elsewhere. Nothing more is written by this process."""


class BudgetExceededError(LLMChatError):
    """A hard limit of :doc:`limits` is reached: no provider call is made.

    ``limit`` names it (``usd_per_day``, ``usd_per_month``, ``tokens_per_day``,
    ``runs_per_hour``, ``concurrent_runs``), ``used`` and ``allowed`` are the amounts (a
    ``Decimal`` for dollars, an ``int`` otherwise), ``resets_at`` when the window frees up
    (an aware ``datetime``; ``None`` for concurrent runs, freed when one ends).
    """

    def __init__(
        self,
        limit: str,
        *,
        used: Any = None,
        allowed: Any = None,
        resets_at: Any = None,
        message: str | None = None,
    ):
        self.limit = limit
        self.used = used
        self.allowed = allowed
        self.resets_at = resets_at
        self.message = message or f"The {limit.replace('_', ' ')} limit is reached."
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready fields of a 429 body or an event (no ``detail``)."""
        return {
            "limit": self.limit,
            "used": None if self.used is None else str(self.used),
            "allowed": None if self.allowed is None else str(self.allowed),
            "resets_at": self.resets_at.isoformat() if self.resets_at is not None else None,
        }

    def __reduce__(self):
        return (
            _rebuild_budget,
            (self.limit, self.used, self.allowed, self.resets_at, self.message),
        )


def _rebuild_budget(limit, used, allowed, resets_at, message) -> BudgetExceededError:
    return BudgetExceededError(
        limit, used=used, allowed=allowed, resets_at=resets_at, message=message
    )


# Safe words for a user, most specific first: a provider's own error text stays in the
# logs, never in a run's ``error``, an event or an API response.
_SAFE_ERRORS: tuple[tuple[type[BaseException], str, str], ...] = (
    (AuthenticationError, "auth", "The provider rejected the credentials."),
    (RateLimitError, "rate_limited", "The provider is rate limiting requests; retry later."),
    (
        ContextLengthExceededError,
        "context_length",
        "The conversation is too long for the model.",
    ),
    (OverloadedError, "overloaded", "The provider is overloaded; retry later."),
    (ProviderTimeoutError, "timeout", "The provider did not answer in time."),
    (
        IncompleteStreamError,
        "incomplete_stream",
        "The provider's stream ended early; retry to continue.",
    ),
    (ProviderError, "provider_error", "The provider returned an error."),
    (BudgetExceededError, "budget", ""),
    (
        StructuredOutputError,
        "structured_output_error",
        "The reply was not valid JSON for the chat's schema.",
    ),
    (ConfigurationError, "configuration_error", "The provider is not configured."),
    (DoubleTextingRejected, "double_texting_rejected", ""),
    (ChatBusyError, "chat_busy", ""),
    (UnsupportedFeatureError, "unsupported", ""),
    (ArgumentError, "invalid", ""),
)


def safe_error(exc: BaseException) -> tuple[str, str]:
    """``(error_type, message)`` for ``exc`` in words safe to show a user: the library's own
    messages for its argument errors, fixed words for everything else."""
    from django.core.exceptions import ImproperlyConfigured

    if isinstance(exc, ImproperlyConfigured):
        return "configuration_error", "The provider is not configured."
    for cls, kind, message in _SAFE_ERRORS:
        if isinstance(exc, cls):
            # our own messages (a bad argument, a busy chat) name no secret
            return kind, message or str(exc)[:500]
    return "internal_error", "The reply failed."


__all__ = [
    "LLMChatError",
    "ArgumentError",
    "InputError",
    "ConfigurationError",
    "UnsupportedFeatureError",
    "ProviderError",
    "AuthenticationError",
    "RateLimitError",
    "ContextLengthExceededError",
    "OverloadedError",
    "ProviderTimeoutError",
    "IncompleteStreamError",
    "StructuredOutputError",
    "InterruptError",
    "ChatBusyError",
    "RunInProgress",
    "DoubleTextingRejected",
    "RunLostError",
    "BudgetExceededError",
    "safe_error",
]
