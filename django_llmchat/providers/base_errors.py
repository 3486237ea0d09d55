"""How a provider's failures become the :mod:`django_llmchat.errors` tree: error bodies
and mid-stream error events read, HTTP statuses and vendor codes classified, retry hints
applied, network failures named, the API key scrubbed from every text.

:class:`~django_llmchat.providers.base.Provider` calls these from its error methods, which
vendor modules override (``error_details``, ``is_context_length_error``...)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx

from ..errors import (
    AuthenticationError,
    ContextLengthExceededError,
    IncompleteStreamError,
    OverloadedError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitError,
)
from .framing import SSEDecoder
from .retry import parse_retry_after

if TYPE_CHECKING:
    from .base import Provider

# Response headers never copied onto an error.
_PRIVATE_HEADERS = frozenset({"set-cookie", "authorization", "x-api-key", "x-goog-api-key"})


def _sse_error_payload(text: str) -> Any:
    """The first JSON event of an SSE-framed error body (``data: {"error": ...}``), else
    the text itself."""
    decoder = SSEDecoder()
    for _name, data in [*decoder.feed(text.encode("utf-8")), *decoder.flush()]:
        try:
            return json.loads(data)
        except ValueError:
            continue
    return text


def error_details(payload: Any) -> tuple[str, str | None]:
    """``(message, code)`` from an error body of the usual shapes."""
    if isinstance(payload, list) and payload:
        payload = payload[0]
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, str):
            return err, None
        if isinstance(err, dict):
            message = err.get("message") or payload.get("message") or ""
            if not message and "detail" in payload:  # {"detail": "Invalid API Key"}
                detail = payload["detail"]
                if isinstance(detail, list):  # validation errors: [{"msg": ...}]
                    detail = "; ".join(
                        str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail
                    )
                message = detail
            code = err.get("type") or err.get("code") or err.get("status")
            return str(message), (str(code) if code is not None else None)
    return (str(payload)[:500] if payload else ""), None


def is_context_length_error(message: str, code: str | None) -> bool:
    """Whether an error's code or message says the prompt is over the context window."""
    text = f"{code or ''} {message}".lower()
    return (
        "context_length" in text
        or "context window" in text
        or ("prompt is too long" in text)
        or ("maximum context length" in text)
    )


def error_from_payload(
    provider: Provider,
    payload: Any,
    *,
    status: int | None = None,
    headers: dict[str, str] | None = None,
    body: str | None = None,
) -> ProviderError:
    """An error answer of ``provider`` (HTTP error body or a mid-stream error event) as an
    exception of the :mod:`django_llmchat.errors` tree, with its retry hints."""
    message, code = provider.error_details(payload)
    message = message or (f"HTTP {status}" if status else "error")
    codes = (code or "").lower()
    # A mid-stream error often carries the HTTP status it stands for as its code.
    numeric = codes.isascii() and codes.isdigit()  # int() refuses "²", which isdigit() takes
    effective = status if status is not None else (int(codes) if numeric else None)
    kw: dict[str, Any] = {
        "provider": provider.name,
        "status": status,
        "body": body if body is not None else (json.dumps(payload) if payload else None),
        "headers": headers,
        "code": code,
    }
    if effective in (401, 403) or "auth" in codes or "permission" in codes:
        err: ProviderError = AuthenticationError(message, **kw)
    elif effective == 429 or "rate_limit" in codes or codes == "resource_exhausted":
        err = RateLimitError(message, **kw)
    elif effective == 529 or "overloaded" in codes:
        err = OverloadedError(message, **kw)
    elif provider.is_context_length_error(status, message, code):
        err = ContextLengthExceededError(message, **kw)
    else:
        if status is None:
            kw["retryable"] = (
                effective in ProviderError.retryable_statuses
                if effective is not None
                else codes in ("server_error", "api_error", "internal", "unavailable")
            )
        err = ProviderError(message, **kw)
    return apply_retry_hints(err, payload)


def error_from_response(provider: Provider, response: httpx.Response) -> ProviderError:
    """The error an HTTP error answer stands for. Its body is JSON, or an SSE stream
    carrying the error as an event (a proxy answering a streamed request), or text."""
    text = response.text
    try:
        payload: Any = json.loads(text) if text else None
    except ValueError:
        payload = _sse_error_payload(text)
    headers = {
        k.lower(): v for k, v in response.headers.items() if k.lower() not in _PRIVATE_HEADERS
    }
    return provider.error_from_payload(
        payload, status=response.status_code, headers=headers, body=text
    )


def apply_retry_hints(err: ProviderError, payload: Any = None) -> ProviderError:
    """``retry_after`` from the headers or the body; ``x-should-retry`` obeyed."""
    if err.retry_after is None:
        err.retry_after = parse_retry_after(
            err.headers, payload if payload is not None else err.body
        )
    should = (err.headers.get("x-should-retry") or "").lower()
    if should == "true":
        err.retryable = True
    elif should == "false":
        err.retryable = False
    return err


def finish_error(err: ProviderError, name: str, key: str | None) -> ProviderError:
    """Last pass over every error of an attempt: provider ``name``, retry hints, ``key``
    scrubbed from its text."""
    if err.provider is None:
        err.provider = name
    if err.retry_after is None or err.headers.get("x-should-retry"):
        apply_retry_hints(err)
    if key and len(key) >= 6:

        def scrub(value: Any) -> Any:
            return value.replace(key, "[redacted]") if isinstance(value, str) else value

        err.message = scrub(err.message)
        err.args = tuple(scrub(a) for a in err.args)
        err.body = scrub(err.body)
        err.code = scrub(err.code)
        err.headers = {k: scrub(v) for k, v in err.headers.items()}
    return err


def scrub_text(text: str, key: str | None) -> str:
    """``text`` with ``key`` (when it is long enough to be one) replaced."""
    return text.replace(key, "[redacted]") if key and len(key) >= 6 else text


def transport_error(exc: Exception, where: str, detail: str, name: str) -> ProviderError:
    """A failure before any response: connection refused, DNS, TLS, timeouts."""
    if isinstance(exc, httpx.TimeoutException):
        phase = {
            httpx.ConnectTimeout: "connecting to",
            httpx.ReadTimeout: "waiting for",
            httpx.WriteTimeout: "sending to",
            httpx.PoolTimeout: "waiting for a free connection to",
        }.get(type(exc), "talking to")
        return ProviderTimeoutError(
            f"timed out {phase} {where} ({type(exc).__name__})", provider=name
        )
    if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError):
        return ProviderTimeoutError(
            f"connection to {where} failed ({type(exc).__name__}: {detail})",
            provider=name,
        )
    return ProviderError(
        f"request to {where} failed ({type(exc).__name__}: {detail})",
        provider=name,
        retryable=False,
    )


def midstream_error(exc: Exception, where: str, detail: str, name: str) -> IncompleteStreamError:
    """A stream whose connection broke after its answer began."""
    return IncompleteStreamError(
        f"stream from {where} broke before its terminal event ({type(exc).__name__}: {detail})",
        provider=name,
    )


def host(base_url: str, name: str) -> str:
    """Where a provider is, for an error's text: the host only (a query string could
    carry a key)."""
    try:
        return httpx.URL(base_url).host or base_url
    except Exception:
        return name or "the provider"
