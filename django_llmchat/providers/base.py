"""HTTP plumbing shared by every provider: clients, auth, framing, errors, retries.

A vendor module subclasses :class:`Provider` and only builds requests and reads answers:

* ``auth_headers()``: the vendor's auth headers for ``self.api_key``;
* ``endpoint(request, stream=...)``: the path (and query) under ``base_url``;
* ``build_payload(request, stream=...)``: the JSON body;
* ``parse_response(data, request)``: the whole JSON answer to ``request`` ->
  :class:`ProviderResponse`;
* ``new_stream_parser(request)``: a :class:`StreamParser` for one streamed answer (by
  default ``stream_parser_class(self, request)``).

A bundled protocol is three modules: ``<vendor>.py`` (requests and whole answers),
``<vendor>_stream.py`` (its stream parser) and ``<vendor>_wire.py``, the vocabulary both
read (finish reasons, usage, citations, call ids), which imports neither.

Everything else lives here and beside it: one pooled httpx client per configuration and
process, timeouts, the User-Agent (``base_clients``), translation of HTTP and network
failures into :mod:`django_llmchat.errors` (``base_errors``, called from the error methods
here, which a vendor module may override), SSE / NDJSON decoding (``framing``), the
response builder vendor parsers feed (``parsing``), retry hints and backoff (``retry``)
and the streamed call (``stream``). There is one implementation of an attempt: the async
methods run the sync one in a worker thread.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import httpx

from ..errors import AuthenticationError, IncompleteStreamError, ProviderError
from . import _json
from . import base_clients as _clients
from . import base_errors as _errors
from .base_clients import (
    CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    POOL_LIMITS,
    USER_AGENT,
    ProviderClient,
    _ssl_context,
    close_clients,
)
from .base_clients import (  # a forked worker runs it; tests call it here
    _forget_clients_after_fork as _forget_clients_after_fork,
)
from .framing import NDJSONDecoder, SSEDecoder, iter_ndjson, iter_sse
from .parsing import ResponseBuilder, StreamParser, parse_arguments
from .redact import redact_request
from .retry import OnRetry, backoff_delay, parse_duration, parse_retry_after
from .stream import ProviderStream, call_in
from .types import Capabilities, ProviderRequest, ProviderResponse

__all__ = [
    "USER_AGENT",
    "Provider",
    "ProviderStream",
    "StreamParser",
    "ResponseBuilder",
    "SSEDecoder",
    "NDJSONDecoder",
    "iter_sse",
    "iter_ndjson",
    "parse_arguments",
    "parse_retry_after",
    "parse_duration",
    "backoff_delay",
    "close_clients",
    "merge_vendor_options",
    "as_authentication_error",
    "copy_params",
]

logger = logging.getLogger("django_llmchat.providers")


# -- small helpers -----------------------------------------------------------------------


def merge_vendor_options(body: dict[str, Any], options: Any) -> dict[str, Any]:
    """A request body with the vendor options of ``params[<provider name>]`` merged over it:
    dicts key by key, a ``tools`` list appended to (server tools beside the functions),
    anything else replaced."""
    if not isinstance(options, dict):
        return body
    out = dict(body)
    for key, value in options.items():
        current = out.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            out[key] = merge_vendor_options(current, value)
        elif key == "tools" and isinstance(current, list) and isinstance(value, list):
            out[key] = current + value
        else:
            out[key] = value
    return out


def as_authentication_error(error: ProviderError) -> AuthenticationError:
    """``error`` as an :class:`AuthenticationError` (never retried), all else kept: for a
    vendor that answers a bad key with a status other than 401 or 403."""
    attributes = error._attributes()
    del attributes["retryable"]
    return AuthenticationError(error.message, **attributes)


def copy_params(params: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The generation parameters of ``params`` named in ``names`` (ours -> the vendor's
    field) that are set, in the order of ``names``."""
    return {field: params[key] for key, field in names.items() if params.get(key) is not None}


def _positional_count(function: Any) -> int:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return 3
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return 3
    return sum(1 for p in parameters if p.kind in kinds)


def _setting(name: str) -> Any:
    """An ``LLMCHAT`` setting, or its default when Django is not configured (scripts)."""
    from ..conf import DEFAULTS, settings

    try:
        return getattr(settings, name)
    except Exception:  # ImproperlyConfigured outside a Django project
        return DEFAULTS[name]


# -- the provider ------------------------------------------------------------------------


class Provider:
    """Base class of a provider connection. Subclasses speak one wire protocol.

    ``sleep`` is the wait between retries; tests replace it on an instance
    (``provider.sleep = waits.append``) so nothing really waits.
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    default_base_url: ClassVar[str] = ""
    api_key_env: ClassVar[str | None] = None
    requires_api_key: ClassVar[bool] = True
    capabilities: ClassVar[Capabilities] = Capabilities()
    stream_framing: ClassVar[str] = "sse"  # or "ndjson"
    stream_parser_class: ClassVar[type[StreamParser] | None] = None
    """What :meth:`new_stream_parser` builds: ``stream_parser_class(provider, request)``."""

    sleep: Callable[[float], Any] = staticmethod(time.sleep)

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | Mapping[str, float] | None = None,
        max_retries: int | None = None,
        options: dict[str, Any] | None = None,
        transport: httpx.BaseTransport | None = None,
        name: str | None = None,
    ):
        if name and name != self.name:
            self.name = name  # a configured alias, e.g. LLMCHAT["PROVIDERS"]["lmstudio"]
        self.api_key = api_key
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
        self._max_retries = max_retries
        self.options = dict(options or {})
        self._transport = transport
        self._client: ProviderClient | None = None
        self._generation = _clients._GENERATION

    def __repr__(self) -> str:  # never shows the key
        return f"<{type(self).__name__} {self.name} {self.base_url}>"

    @property
    def max_retries(self) -> int:
        """Retries after the first attempt; ``LLMCHAT["MAX_RETRIES"]`` unless configured."""
        if self._max_retries is not None:
            return self._max_retries
        return int(_setting("MAX_RETRIES"))

    @max_retries.setter
    def max_retries(self, value: int | None) -> None:
        self._max_retries = value

    def option(self, key: str) -> Any:
        """A provider option: ``LLMCHAT["PROVIDERS"][name]["options"][key]`` (or a key
        given beside the standard settings)."""
        nested = self.options.get("options")
        if isinstance(nested, dict) and nested.get(key) is not None:
            return nested[key]
        return self.options.get(key)

    # -- what a vendor module implements -------------------------------------------------
    def auth_headers(self) -> dict[str, str]:
        return {}

    def endpoint(self, request: ProviderRequest, *, stream: bool) -> str:
        raise NotImplementedError

    def build_payload(self, request: ProviderRequest, *, stream: bool) -> dict[str, Any]:
        raise NotImplementedError

    def parse_response(self, data: dict[str, Any], request: ProviderRequest) -> ProviderResponse:
        """The whole JSON answer ``data`` to ``request``, read with nothing but the two."""
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("parse_response")
        if own is not None and _positional_count(own) < 3:  # (self, data): the old hook
            warnings.warn(
                f"{cls.__qualname__}.parse_response(data) should take the request too: "
                "parse_response(data, request)",
                DeprecationWarning,
                stacklevel=2,
            )

            def parse_response(self, data, request, _old=own):
                return _old(self, data)

            cls.parse_response = parse_response

    def new_stream_parser(self, request: ProviderRequest) -> StreamParser:
        if self.stream_parser_class is None:
            raise NotImplementedError
        return self.stream_parser_class(self, request)

    # -- errors (base_errors) -------------------------------------------------------------
    def error_details(self, payload: Any) -> tuple[str, str | None]:
        """``(message, code)`` from an error body. Override for unusual shapes."""
        return _errors.error_details(payload)

    def is_context_length_error(self, status: int | None, message: str, code: str | None) -> bool:
        return _errors.is_context_length_error(message, code)

    def error_from_payload(
        self,
        payload: Any,
        *,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        body: str | None = None,
    ) -> ProviderError:
        """Turn an error answer (HTTP error body or a mid-stream error event) into an
        exception of the :mod:`django_llmchat.errors` tree, with its retry hints."""
        return _errors.error_from_payload(self, payload, status=status, headers=headers, body=body)

    def error_from_response(self, response: httpx.Response) -> ProviderError:
        """The error an HTTP error answer stands for. Its body is JSON, or an SSE stream
        carrying the error as an event (a proxy answering a streamed request), or text."""
        return _errors.error_from_response(self, response)

    def _apply_retry_hints(self, err: ProviderError, payload: Any = None) -> ProviderError:
        return _errors.apply_retry_hints(err, payload)

    def finish_error(self, err: ProviderError) -> ProviderError:
        """Last pass over every error of an attempt: provider name, retry hints, the key
        scrubbed from its text."""
        return _errors.finish_error(err, self.name, self.api_key)

    def scrub_text(self, text: str) -> str:
        return _errors.scrub_text(text, self.api_key)

    def transport_error(self, exc: Exception) -> ProviderError:
        """A failure before any response: connection refused, DNS, TLS, timeouts."""
        detail = self.scrub_text(str(exc)) or type(exc).__name__
        return _errors.transport_error(exc, self._where(), detail, self.name)

    def midstream_error(self, exc: Exception) -> IncompleteStreamError:
        """A stream whose connection broke after its answer began."""
        detail = self.scrub_text(str(exc)) or "no detail"
        return _errors.midstream_error(exc, self._where(), detail, self.name)

    def _where(self) -> str:
        return _errors.host(self.base_url, self.name)

    # -- retries -------------------------------------------------------------------------
    def retry_delay(self, error: ProviderError, attempt: int) -> float | None:
        """Seconds to wait before retry number ``attempt + 1``, or ``None`` to give up."""
        if not error.retryable or attempt >= self.max_retries:
            return None
        cap = float(_setting("MAX_RETRY_WAIT"))
        if error.retry_after is not None:
            return max(0.0, min(error.retry_after, cap))
        return min(backoff_delay(attempt), cap)

    def before_retry(
        self, error: ProviderError, delay: float, attempt: int, on_retry: OnRetry | None
    ) -> None:
        """Log a failed attempt that will be retried and tell ``on_retry``."""
        logger.info(
            "%s; retrying in %.2fs (retry %d of %d)", error, delay, attempt + 1, self.max_retries
        )
        if on_retry is not None:
            on_retry(error, attempt + 1)

    # -- plumbing ------------------------------------------------------------------------
    def headers(self) -> dict[str, str]:
        return {
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            **(self.options.get("headers") or {}),
            **self.auth_headers(),
        }

    def httpx_timeout(self) -> httpx.Timeout:
        """``timeout`` is seconds (connect capped at :data:`CONNECT_TIMEOUT`) or a dict of
        ``connect`` / ``read`` / ``write`` / ``pool``."""
        t = self.timeout
        if isinstance(t, Mapping):
            read = float(t.get("read", DEFAULT_TIMEOUT))
            return httpx.Timeout(
                read,
                connect=float(t.get("connect", min(read, CONNECT_TIMEOUT))),
                write=float(t.get("write", read)),
                pool=float(t.get("pool", read)),
            )
        t = float(t)
        return httpx.Timeout(t, connect=min(t, CONNECT_TIMEOUT))

    def client_key(self) -> tuple:
        """What makes two configurations need different connection pools."""
        t = self.timeout
        timeout = tuple(sorted(t.items())) if isinstance(t, Mapping) else t
        return (
            type(self).__module__,
            type(self).__qualname__,
            self.base_url,
            timeout,
            self.options.get("proxy"),
            self.options.get("verify", True),
        )

    def _client_kwargs(self) -> dict[str, Any]:
        verify = self.options.get("verify", True)
        return {
            "timeout": self.httpx_timeout(),
            "limits": POOL_LIMITS,
            "headers": {"User-Agent": USER_AGENT},
            "verify": _ssl_context() if verify is True else verify,
            "proxy": self.options.get("proxy"),
            "follow_redirects": False,
        }

    @property
    def client(self) -> ProviderClient:
        """The pooled sync client for this configuration (created once per process)."""
        if self._client is not None and self._generation == _clients._GENERATION:
            return self._client
        with _clients._CLIENT_LOCK:
            if self._generation != _clients._GENERATION:
                self._client = None
                self._generation = _clients._GENERATION
            if self._client is None:
                if self._transport is not None:
                    self._client = ProviderClient(
                        transport=self._transport, **self._client_kwargs()
                    )
                else:
                    key = self.client_key()
                    client = _clients._SYNC_CLIENTS.get(key)
                    if client is None:
                        client = _clients._SYNC_CLIENTS[key] = ProviderClient(
                            **self._client_kwargs()
                        )
                    self._client = client
        return self._client

    def url(self, request: ProviderRequest, *, stream: bool) -> str:
        return self.base_url + self.endpoint(request, stream=stream)

    def encode_payload(self, payload: dict[str, Any]) -> bytes:
        return _json.dumps(payload)

    def request_body(self, request: ProviderRequest, *, stream: bool) -> bytes:
        """The bytes sent for ``request``: ``LLMCHAT["REDACT"]`` applied to its texts (the
        egress: every wire protocol goes through here), then the vendor's payload."""
        return self.encode_payload(self.build_payload(redact_request(request), stream=stream))

    def read_response(self, response: httpx.Response, request: ProviderRequest) -> ProviderResponse:
        """A whole HTTP answer to ``request``: an error raised, else ``parse_response``."""
        if response.status_code >= 400:
            raise self.error_from_response(response)
        try:
            data = _json.loads(response.content)
        except ValueError:
            raise ProviderError(
                "the answer is not JSON",
                provider=self.name,
                status=response.status_code,
                body=response.text[:2000],
                retryable=False,
            ) from None
        return self.parse_response(data, request)

    def complete(
        self, request: ProviderRequest, *, on_retry: OnRetry | None = None
    ) -> ProviderResponse:
        """One whole answer, retried on retryable errors: one non-streaming provider call
        (not ``Chat.complete``, which runs a chat's loop; nor ``tasks.complete_chat``, the
        Celery task working a chat's queued runs).

        ``on_retry(error, retry_number)`` is called for each failed attempt that will be
        retried (``retry_number`` counts from 1), before the wait.
        """
        url = self.url(request, stream=False)
        body = self.request_body(request, stream=False)
        attempt = 0
        while True:
            try:
                try:
                    response = call_in(
                        getattr(request, "trace_context", None),
                        self.client.send_direct,
                        url,
                        body,
                        self.headers(),
                    )
                except httpx.HTTPError as exc:
                    raise self.transport_error(exc) from None
                return self.read_response(response, request)
            except ProviderError as err:
                failure = self.finish_error(err)
                delay = self.retry_delay(failure, attempt)
                if delay is None:
                    raise
            self.before_retry(failure, delay, attempt, on_retry)
            self.sleep(delay)
            attempt += 1

    async def acomplete(
        self, request: ProviderRequest, *, on_retry: OnRetry | None = None
    ) -> ProviderResponse:
        """:meth:`complete` for ``await``: the same call, run in a worker thread."""
        return await asyncio.to_thread(self.complete, request, on_retry=on_retry)

    def stream(
        self, request: ProviderRequest, *, on_retry: OnRetry | None = None
    ) -> ProviderStream:
        """Events as they arrive (``for``); ``.response`` holds the whole answer after."""
        return ProviderStream(self, request, on_retry=on_retry)

    def astream(
        self, request: ProviderRequest, *, on_retry: OnRetry | None = None
    ) -> ProviderStream:
        """The same stream, for ``async for`` (its attempts run in a worker thread)."""
        return ProviderStream(self, request, on_retry=on_retry)
