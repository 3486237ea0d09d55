"""A real HTTP server on loopback that answers like the LLM vendors, from a script.

It listens on ``127.0.0.1`` (an ephemeral port by default) in a background thread, one
thread per connection, with HTTP/1.1 keep-alive. Streams are sent with chunked transfer
encoding, every response head and every SSE frame in a single ``sendall`` on a socket with
``TCP_NODELAY``, so an exchange costs no Nagle/delayed-ACK stalls.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .wire import (
    Fault,
    RecordedRequest,
    Renderer,
    Reply,
    coerce,
    renderer_for,
)

__all__ = ["FakeProviderServer", "PROVIDER_NAMES", "Responder", "echo"]

logger = logging.getLogger("django_llmchat.testing")

Responder = Callable[[RecordedRequest], Any]
"""A callable that answers one request with a Reply, a Fault or a str."""

PROVIDER_NAMES = (
    "openai",
    "anthropic",
    "gemini",
    "ollama",
    "openrouter",
    "deepseek",
    "mistral",
    "openai_compatible",
    "perplexity",
    "xai",
)
"""Built-in provider names :meth:`FakeProviderServer.provider_settings` covers (with any
other name the provider registry knows)."""

# Base URLs as the vendor SDKs take them: OpenAI-style ones include /v1, these do not.
_ROOT_BASE_PROVIDERS = frozenset({"anthropic", "gemini"})

_GEMINI_PATH = re.compile(
    r"^(?:/[^:]*)?/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$"
)


def _known_provider_names() -> tuple[str, ...]:
    names = list(PROVIDER_NAMES)
    try:
        from ..providers import PROVIDERS
    except Exception:  # the registry is optional here
        PROVIDERS = {}
    names += [name for name in PROVIDERS if name not in names]
    return tuple(names)


def echo(request: RecordedRequest) -> Reply:
    """A responder answering with the last user message (``"You said: ..."``)."""
    text = request.last_user_text
    return Reply(text=f"You said: {text}" if text else "Hello! How can I help?")


def route(method: str, path: str) -> tuple[str | None, str | None]:
    """``(wire format, model from the path)`` for a request line; format None = no route."""
    if method != "POST":
        return None, None
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat_completions", None
    if path.endswith("/responses"):
        return "responses", None
    if path.endswith("/messages"):
        return "anthropic", None
    match = _GEMINI_PATH.match(path)
    if match:
        return "gemini", match.group("model")
    return None, None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
    owner: FakeProviderServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hang up mid-stream on purpose in tests; that is not an error here.
        return


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "django-llmchat-fake"
    sys_version = ""
    server: _Server
    head_sent = False
    # Idle keep-alive connections are closed after this many seconds.
    timeout = 120

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.owner._track(self.connection)

    def finish(self) -> None:
        self.server.owner._untrack(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        return

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except OSError:
            # Broken pipe, connection reset, socket closed by stop(): drop the connection.
            self.close_connection = True

    def do_POST(self) -> None:
        self.head_sent = False
        try:
            self.server.owner._serve(self)
        except OSError:
            raise
        except Exception as exc:
            # A bug in a responder (or here) becomes an HTTP 500 naming it, not a hang-up.
            logger.exception("django_llmchat.testing: failed to answer %s", self.path)
            self.close_connection = True
            if not self.head_sent:
                message = f"django_llmchat.testing: {type(exc).__name__}: {exc}"
                self.server.owner._send_json(
                    self, 500, {"error": {"message": message, "type": "server_error"}}
                )

    do_GET = do_PUT = do_DELETE = do_PATCH = do_POST

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""


class FakeProviderServer:
    """A loopback HTTP server speaking OpenAI (Responses and Chat Completions), Anthropic
    and Gemini, answering from scripted :class:`Reply` / :class:`Fault` values.

    Replies are served in the order :meth:`script` queued them, across all formats. When
    the script is empty the ``responder`` (a callable taking the
    :class:`RecordedRequest`) answers if there is one, else the ``default`` reply
    (``Reply("ok")`` unless given). With ``default=None`` an unscripted request gets an
    HTTP 500 whose message says so, which makes unexpected calls fail loudly.

    ``chunk_delay`` and ``first_byte_delay`` (seconds) apply to every answer whose fault
    does not set its own, to imitate a slower model. ``reasoning_field`` is where Chat
    Completions streams carry thinking (``"reasoning"`` or ``"reasoning_content"``).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        default: Reply | str | None = "ok",
        responder: Responder | None = None,
        chunk_delay: float = 0.0,
        first_byte_delay: float = 0.0,
        reasoning_field: str = "reasoning",
    ):
        self.host = host
        self._port = port
        self.default: Reply | None = None
        if default is not None:
            self.default = default if isinstance(default, Reply) else Reply(text=default)
        self.responder = responder
        self.chunk_delay = chunk_delay
        self.first_byte_delay = first_byte_delay
        self.reasoning_field = reasoning_field
        self._initial = (self.default, responder, chunk_delay, first_byte_delay, reasoning_field)
        self._queue: deque[Any] = deque()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeProviderServer:
        if self._httpd is not None:
            return self
        httpd = _Server((self.host, self._port), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-llm-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
            self._connections.clear()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    close = stop

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake provider server is not running; call start()")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the origin, without a path."""
        return f"http://{self.host}:{self.port}"

    def base_url(self, provider: str = "openai") -> str:
        """The ``base_url`` to give a provider: the origin for Anthropic and Gemini,
        ``<origin>/v1`` for OpenAI and every OpenAI-compatible provider."""
        if provider in _ROOT_BASE_PROVIDERS:
            return self.url
        return self.url + "/v1"

    def provider_settings(
        self,
        *names: str,
        api_key: str = "test-key",
        **options: Any,
    ) -> dict[str, dict[str, Any]]:
        """An ``LLMCHAT["PROVIDERS"]`` dict pointing ``names`` (default: every built-in
        provider) at this server with a dummy key; ``options`` are merged into each."""
        names = names or _known_provider_names()
        return {
            name: {"api_key": api_key, "base_url": self.base_url(name), **options} for name in names
        }

    def llmchat_settings(
        self, provider: str = "openai", model: str | None = None, **overrides: Any
    ) -> dict[str, Any]:
        """A whole ``LLMCHAT`` setting: every provider pointed at this server, ``provider``
        (and ``model``) the defaults, no retry waits; ``overrides`` are merged on top."""
        value: dict[str, Any] = {
            "DEFAULT_PROVIDER": provider,
            "PROVIDERS": self.provider_settings(*_known_provider_names(), provider),
            "MAX_RETRY_WAIT": 0.0,
        }
        if model is not None:
            value["DEFAULT_MODEL"] = model
        value.update(overrides)
        return value

    # -- scripting ------------------------------------------------------------------------
    def script(self, *items: Reply | Fault | str | Responder) -> FakeProviderServer:
        """Queue answers, served in order across all wire formats. A str is a text reply;
        a callable answers the one request it is dequeued for."""
        coerced = [coerce(item) for item in items]
        with self._lock:
            self._queue.extend(coerced)
        return self

    def reset(self) -> None:
        """Forget the script and the recorded requests, and restore the settings given to
        the constructor (``default``, ``responder``, delays, ``reasoning_field``)."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
        (
            self.default,
            self.responder,
            self.chunk_delay,
            self.first_byte_delay,
            self.reasoning_field,
        ) = self._initial

    @property
    def remaining(self) -> int:
        """How many scripted answers have not been served yet."""
        return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def last_request(self) -> RecordedRequest | None:
        with self._lock:
            return self._requests[-1] if self._requests else None

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until ``count`` requests arrived (or raise ``TimeoutError``)."""
        deadline = time.monotonic() + timeout
        while len(self._requests) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self._requests)} of {count} requests arrived")
            time.sleep(0.005)
        return self.requests

    # -- connections ----------------------------------------------------------------------
    def _track(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def _untrack(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)

    def _next(self, request: RecordedRequest) -> Reply | Fault | None:
        with self._lock:
            item = self._queue.popleft() if self._queue else None
        if item is None and self.responder is not None:
            item = self.responder
        if item is None:
            return self.default
        if callable(item) and not isinstance(item, Reply | Fault):
            item = item(request)
            if item is None:
                return self.default
            item = coerce(item)
        return item  # type: ignore[return-value]

    # -- serving --------------------------------------------------------------------------
    def _serve(self, h: _Handler) -> None:
        split = urlsplit(h.path)
        raw = h.read_body()
        fmt, path_model = route(h.command, split.path)
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        query = dict(parse_qsl(split.query))
        stream = False
        model = path_model
        if fmt == "gemini":
            stream = split.path.endswith(":streamGenerateContent")
        elif isinstance(body, dict):
            stream = body.get("stream") is True
            model = body.get("model") if isinstance(body.get("model"), str) else None
        request = RecordedRequest(
            method=h.command,
            path=split.path,
            query=query,
            headers={k.lower(): v for k, v in h.headers.items()},
            body=body,
            raw_body=raw,
            format=fmt,
            stream=stream,
            model=model,
            peer=tuple(h.client_address[:2]),
        )
        with self._lock:
            self._requests.append(request)
        if fmt is None:
            message = f"django_llmchat.testing: no route for {h.command} {split.path}"
            self._send_json(h, 404, {"error": {"message": message, "type": "not_found"}})
            return
        renderer = renderer_for(fmt, reasoning_field=self.reasoning_field)
        item = self._next(request)
        if item is None:
            message = (
                f"django_llmchat.testing: no scripted reply left for {h.command} "
                f"{split.path} (queue one with server.script(...))"
            )
            self._send_json(h, 500, renderer.error_body(500, None, message))
            return
        fault = item if isinstance(item, Fault) else None
        reply = item if isinstance(item, Reply) else (fault.reply if fault else None)
        if reply is None:
            reply = self.default or Reply(text="ok")
        first_byte_delay = self.first_byte_delay
        if fault is not None and fault.first_byte_delay is not None:
            first_byte_delay = fault.first_byte_delay
        if first_byte_delay:
            time.sleep(first_byte_delay)
        if fault is not None and fault.drop:
            h.close_connection = True
            self._abort(h)
            return
        extra = dict(renderer.request_id_header())
        if reply.headers:
            extra.update(reply.headers)
        if fault is not None:
            extra.update(self._fault_headers(fault))
        if fault is not None and (fault.is_http_error or fault.body is not None):
            self._send_fault(h, renderer, fault, extra)
            return
        if stream:
            self._send_stream(h, renderer, reply, fault, request, extra)
        else:
            data = renderer.encode_body(reply, request)
            cut = fault is not None and fault.cut_after is not None
            self._send_whole(h, data, extra, cut=cut)

    @staticmethod
    def _fault_headers(fault: Fault) -> dict[str, str]:
        headers: dict[str, str] = {}
        if fault.retry_after is not None:
            value = fault.retry_after
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            headers["Retry-After"] = str(value)
        if fault.retry_after_ms is not None:
            headers["retry-after-ms"] = str(fault.retry_after_ms)
        if fault.headers:
            headers.update(fault.headers)
        return headers

    @staticmethod
    def _head(status: int, headers: dict[str, str], *, close: bool, length: int | None) -> bytes:
        """The status line and headers. ``length`` None: chunked; -1: ends at close."""
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Overloaded" if status == 529 else "Error"
        lines = [
            f"HTTP/1.1 {status} {reason}",
            f"Date: {formatdate(usegmt=True)}",
            "Server: django-llmchat-fake",
        ]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if length is None:
            lines.append("Transfer-Encoding: chunked")
        elif length >= 0:
            lines.append(f"Content-Length: {length}")
        lines.append("Connection: close" if close else "Connection: keep-alive")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send_json(
        self,
        h: _Handler,
        status: int,
        payload: Any,
        headers: dict[str, str] | None = None,
        *,
        raw: bytes | None = None,
    ) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        head = self._head(
            status,
            {"Content-Type": "application/json", **(headers or {})},
            close=h.close_connection,
            length=len(data),
        )
        h.head_sent = True
        h.connection.sendall(head + data)

    def _send_fault(
        self, h: _Handler, renderer: Renderer, fault: Fault, headers: dict[str, str]
    ) -> None:
        status = fault.status or 200
        body = fault.body
        if body is None:
            raw = json.dumps(renderer.error_body(status, fault)).encode()
        elif isinstance(body, bytes):
            raw = body
        elif isinstance(body, str):
            raw = body.encode()
        else:
            raw = json.dumps(body).encode()
        self._send_json(h, status, None, headers, raw=raw)

    def _send_whole(self, h: _Handler, data: bytes, headers: dict[str, str], *, cut: bool) -> None:
        """A whole JSON answer; ``cut``: only its first half, then the connection drops."""
        if cut:
            h.close_connection = True
        head = self._head(
            200,
            {"Content-Type": "application/json; charset=utf-8", **headers},
            close=h.close_connection,
            length=len(data),
        )
        h.head_sent = True
        h.connection.sendall(head + (data[: len(data) // 2] if cut else data))
        if cut:
            self._abort(h)

    def _send_stream(
        self,
        h: _Handler,
        renderer: Renderer,
        reply: Reply,
        fault: Fault | None,
        request: RecordedRequest,
        headers: dict[str, str],
    ) -> None:
        frames = renderer.frames(reply, request)
        cut = False
        if fault is not None and fault.error_event is not None:
            keep = max(0, min(fault.error_event, len(frames) - 1))
            frames = frames[:keep] + renderer.error_frames(fault, request)
        elif fault is not None and fault.cut_after is not None:
            frames = frames[: max(0, min(fault.cut_after, len(frames) - 1))]
            cut = not fault.cut_cleanly
        delay = self.chunk_delay
        if fault is not None and fault.chunk_delay is not None:
            delay = fault.chunk_delay
        chunked = h.request_version != "HTTP/1.0"
        if not chunked:
            h.close_connection = True
        if renderer.format == "gemini" and request.query.get("alt") != "sse":
            content_type = "application/json; charset=UTF-8"
        else:
            content_type = "text/event-stream; charset=utf-8"
        head_headers = {"Content-Type": content_type, "Cache-Control": "no-cache", **headers}
        # HTTP/1.0 clients get a body delimited by closing the connection.
        head = self._head(
            200, head_headers, close=h.close_connection or cut, length=None if chunked else -1
        )
        sock = h.connection
        h.head_sent = True
        sock.sendall(head)
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            if delay and i:
                time.sleep(delay)
            data = b"%x\r\n%s\r\n" % (len(frame), frame) if chunked else frame
            if i == last and chunked and not cut:
                data += b"0\r\n\r\n"
            sock.sendall(data)
        if cut:
            h.close_connection = True
            self._abort(h)
            return
        if not frames and chunked:
            sock.sendall(b"0\r\n\r\n")

    @staticmethod
    def _abort(h: _Handler) -> None:
        """Close the connection now, mid-message if need be."""
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def __repr__(self) -> str:
        where = self.url if self.running else "stopped"
        return f"<FakeProviderServer {where} queued={self.remaining}>"
