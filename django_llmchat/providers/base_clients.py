"""The pooled httpx clients of the providers: one per configuration and process, shared
SSL context, dropped after a fork and by :func:`close_clients`."""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.request
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import httpx

from .. import __version__

USER_AGENT = f"django-llmchat/{__version__} httpx/{httpx.__version__}"

DEFAULT_TIMEOUT = 120.0
CONNECT_TIMEOUT = 10.0
"""Longest wait for a TCP/TLS connection, whatever the (read) timeout is."""

# Many concurrent streams share one pool per configuration; each holds a connection.
POOL_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=30.0)


class _ProviderCookies(httpx.Cookies):
    """The cookie jar of a provider's client: an answer without ``Set-Cookie`` (nearly all
    of a provider API's) is not handed to :mod:`http.cookiejar`, which parses every
    response's headers again (about a tenth of an httpx request's CPU); one with it is
    stored as by any :class:`httpx.Cookies` (a load balancer's affinity cookie)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class ProviderClient(httpx.Client):
    """The providers' pooled :class:`httpx.Client`: the same client, its jar a
    :class:`_ProviderCookies` (httpx reads and writes the jar through the public
    ``cookies`` property, which this class keeps), and :meth:`send_direct`: a provider's
    POST handed straight to the client's transport.

    The client is built with its transport given (``transport=``, or an
    :class:`httpx.HTTPTransport` made as httpx makes its default one: the same SSL
    context, pool limits and environment), so the transport a request goes to is known."""

    def __init__(self, *, transport: httpx.BaseTransport | None = None, **kwargs: Any):
        if transport is None:  # as httpx.Client makes its own
            transport = httpx.HTTPTransport(
                verify=kwargs.get("verify", True),
                trust_env=kwargs.get("trust_env", True),
                http1=kwargs.get("http1", True),
                http2=kwargs.get("http2", False),
                limits=kwargs.get("limits", _HTTPX_DEFAULT_LIMITS),
            )
        super().__init__(transport=transport, **kwargs)
        self.cookies = kwargs.get("cookies")
        # where the client would send every request to this transport: no proxy, given
        # or in the environment (httpx mounts a proxy's transport for it otherwise)
        proxied = (
            kwargs.get("proxy") is not None
            or kwargs.get("mounts")
            or (kwargs.get("trust_env", True) and urllib.request.getproxies())
        )
        self._direct = None if proxied else transport
        self._parsed_urls: dict[str, httpx.URL] = {}
        self._merged_headers: dict[tuple, httpx.Headers] = {}

    @property
    def cookies(self) -> httpx.Cookies:
        return self._provider_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        self._provider_cookies = _ProviderCookies(cookies)

    def send_direct(
        self, url: str, content: bytes, headers: Mapping[str, str], *, stream: bool = False
    ) -> httpx.Response:
        """``self.post(url, content=content, headers=headers)`` (``stream=True``:
        ``self.send(self.build_request(...), stream=True)``, the body unread, for the
        caller to read and close), the same request on the same transport, without the
        client's layers between: building the request from the client's defaults each
        time, its auth and redirect loops, its cookie jar's parse of every answer (a third
        of an httpx request's CPU). The response is the transport's, its ``request``
        (and, read whole, its ``elapsed``) set, its cookies kept and the request logged
        (the ``httpx`` logger, ``INFO``) as the client does. Where the client would do
        more, it does the sending: a cookie to send, an event hook, a proxy, a closed
        client."""
        transport = self._direct
        hooks = self.event_hooks
        if (
            transport is None
            or self.is_closed
            or hooks["request"]
            or hooks["response"]
            or self._provider_cookies
        ):
            request = self.build_request("POST", url, content=content, headers=headers)
            return self.send(request, stream=stream)
        request = httpx.Request(
            "POST",
            self._url(url),
            headers=self._merged(headers),
            content=content,
            extensions={"timeout": self.timeout.as_dict()},
        )
        started = time.perf_counter()
        response = transport.handle_request(request)
        response.request = request
        if not stream:
            try:
                response.read()
            finally:
                response.close()
            response.elapsed = timedelta(seconds=time.perf_counter() - started)
        if "set-cookie" in response.headers:
            self._provider_cookies.extract_cookies(response)
        if _HTTPX_LOG.isEnabledFor(logging.INFO):
            _HTTPX_LOG.info(
                'HTTP Request: %s %s "%s %d %s"',
                request.method,
                request.url,
                response.http_version,
                response.status_code,
                response.reason_phrase,
            )
        return response

    def _url(self, url: str) -> httpx.URL:
        found = self._parsed_urls.get(url)
        if found is None:
            found = httpx.URL(url)
            if len(self._parsed_urls) < 64:  # a provider's few endpoints
                self._parsed_urls[url] = found
        return found

    def _merged(self, headers: Mapping[str, str]) -> httpx.Headers:
        """The client's headers with ``headers`` over them, as ``build_request`` merges
        them (made once per distinct pair: the client's headers may change)."""
        key = (tuple(self.headers.raw), tuple(headers.items()))
        found = self._merged_headers.get(key)
        if found is None:
            found = httpx.Headers(self.headers)
            found.update(headers)
            if len(self._merged_headers) < 64:  # a provider's keys and versions, not per request
                self._merged_headers[key] = found
        return found


_HTTPX_LOG = logging.getLogger("httpx")
_HTTPX_DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)
"""httpx's own default pool limits (a client made without ``limits``)."""

_CLIENT_LOCK = threading.Lock()
_SYNC_CLIENTS: dict[tuple, ProviderClient] = {}
_SSL_CONTEXT: Any = None
_GENERATION = 0
"""Bumped when pooled clients are dropped (fork, close_clients): instances re-fetch theirs."""


def _ssl_context() -> Any:
    # Building a verifying SSL context is most of a client's construction cost: share one.
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx.create_ssl_context()
    return _SSL_CONTEXT


def close_clients() -> None:
    """Close and forget every pooled client."""
    global _GENERATION
    with _CLIENT_LOCK:
        clients = list(_SYNC_CLIENTS.values())
        _SYNC_CLIENTS.clear()
        _GENERATION += 1
    for client in clients:
        client.close()


def _forget_clients_after_fork() -> None:
    # A forked worker must not share the parent's sockets; it builds its own clients.
    global _CLIENT_LOCK, _GENERATION
    _CLIENT_LOCK = threading.Lock()
    _SYNC_CLIENTS.clear()
    _GENERATION += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_clients_after_fork)
