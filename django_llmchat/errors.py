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


class ModelNotFoundError(LLMChatError, LookupError):
    """The model registry has no such model."""


class ProviderError(LLMChatError):
    """The provider answered with an error (HTTP status or an error event in a stream).

    ``status`` is the HTTP status (``None`` for a mid-stream error event), ``body`` the
    error payload as text, ``headers`` the response headers (lower-cased, no secrets),
    ``retry_after`` the server's wait hint in seconds.
    """

    retryable_statuses = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})

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
            retryable = status in self.retryable_statuses if status is not None else False
        self.retryable = retryable
        super().__init__(message)

    def __str__(self) -> str:
        prefix = f"{self.provider}: " if self.provider else ""
        status = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{prefix}{self.message}{status}"

    def _state(self) -> dict[str, Any]:
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
        return (_rebuild, (type(self), self.message, self._state()))


def _rebuild(cls: type[ProviderError], message: str, state: dict[str, Any]) -> ProviderError:
    return cls(message, **state)


class AuthenticationError(ProviderError):
    """401 or 403: the key is missing, wrong or lacks permission."""

    def __init__(self, message: str, **kw: Any):
        kw.setdefault("retryable", False)
        super().__init__(message, **kw)


class RateLimitError(ProviderError):
    """429: too many requests. ``retry_after`` holds the provider's hint when it gave one."""

    def __init__(self, message: str, **kw: Any):
        kw.setdefault("retryable", True)
        super().__init__(message, **kw)


class ContextLengthExceededError(ProviderError):
    """The prompt does not fit in the model's context window."""

    def __init__(self, message: str, **kw: Any):
        kw.setdefault("retryable", False)
        super().__init__(message, **kw)


class OverloadedError(ProviderError):
    """The provider is overloaded (Anthropic 529 / ``overloaded_error``)."""

    def __init__(self, message: str, **kw: Any):
        kw.setdefault("retryable", True)
        super().__init__(message, **kw)


class ProviderTimeoutError(ProviderError):
    """The provider did not answer in time, or the connection failed."""

    def __init__(self, message: str, **kw: Any):
        kw.setdefault("retryable", True)
        super().__init__(message, **kw)


class IncompleteStreamError(ProviderError):
    """A stream ended before the provider's terminal event.

    Events already yielded were delivered; nothing from the failed step is stored.
    """

    def __init__(self, message: str = "stream ended before its terminal event", **kw: Any):
        kw.setdefault("retryable", True)
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
