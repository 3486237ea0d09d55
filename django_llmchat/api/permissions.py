"""Who may call the API and see which chats: authentication, ownership, throttling.

* Authentication: ``REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]`` when the project
  sets it, else token authentication (when ``rest_framework.authtoken`` is installed;
  ``Authorization: Token <key>`` or ``Authorization: Bearer <key>``) and session
  authentication (CSRF enforced, as DRF does).
* Permission: an authenticated user. Ownership is a queryset filter: a user sees their
  own chats only; staff see every chat when ``LLMCHAT["STAFF_SEES_ALL_CHATS"]`` is true.
  Other chats answer 404, on every nested route too.
* Throttling: the project's ``DEFAULT_THROTTLE_CLASSES``, plus the scopes ``llmchat``
  (every request) and ``llmchat_runs`` (requests that start or resume a run), active
  when ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` gives them a rate; ``auth/token/``
  per username and per client address (``LLMCHAT["TOKEN_THROTTLE_RATES"]``, on by
  default). An anonymous client is known by :func:`client_address`.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Mapping

from django.apps import apps
from django.db.models import QuerySet
from rest_framework.authentication import (
    SessionAuthentication,
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.permissions import IsAuthenticated
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

from ..conf import DEFAULTS, settings
from ..models import Chat

__all__ = [
    "BearerTokenAuthentication",
    "ChatAccess",
    "LLMChatRunThrottle",
    "LLMChatThrottle",
    "TokenAddressThrottle",
    "TokenUsernameThrottle",
    "chats_for",
    "chats_of",
    "client_address",
    "default_authenticators",
    "default_throttles",
    "sees_every_chat",
]


def chats_for(user) -> QuerySet:
    """The chats ``user`` may see (none for an anonymous user)."""
    if not user or not user.is_authenticated:
        return Chat.objects.none()
    return chats_of(None if sees_every_chat(user) else user.pk)


def sees_every_chat(user) -> bool:
    """Whether ``user`` (authenticated) sees every chat, not only their own."""
    return bool(user.is_staff and settings.STAFF_SEES_ALL_CHATS)


def chats_of(user_id) -> QuerySet:
    """The chats of the user ``user_id``; every chat for ``None``."""
    qs = Chat.objects.all()
    return qs if user_id is None else qs.filter(user_id=user_id)


class BearerTokenAuthentication(TokenAuthentication):
    """DRF's token authentication taking the key as ``Authorization: Token <key>`` or,
    as most HTTP clients send it, ``Authorization: Bearer <key>``."""

    keywords = ("Token", "Bearer")

    def authenticate(self, request):
        words = get_authorization_header(request).split()
        if words:
            sent = words[0].decode("latin-1").lower()
            for keyword in self.keywords:
                if sent == keyword.lower():
                    self.keyword = keyword  # this request's instance only
                    break
        return super().authenticate(request)


def default_authenticators() -> list:
    """Authentication classes: the project's DRF default when it set one, else token
    (if ``rest_framework.authtoken`` is installed) and session authentication."""
    if "DEFAULT_AUTHENTICATION_CLASSES" in api_settings.user_settings:
        return list(api_settings.DEFAULT_AUTHENTICATION_CLASSES)
    classes: list = []
    if apps.is_installed("rest_framework.authtoken"):
        # first, so an anonymous request gets 401 with a WWW-Authenticate challenge
        classes.append(BearerTokenAuthentication)
    classes.append(SessionAuthentication)
    return classes


class ChatAccess(IsAuthenticated):
    """An authenticated user; which chats they reach is decided by :func:`chats_for`."""


def client_address(request) -> str:
    """The client's address, for throttles: ``REMOTE_ADDR``; with
    ``REST_FRAMEWORK["NUM_PROXIES"]`` set, the address that many trusted proxies put in
    ``X-Forwarded-For`` (DRF's rule). Without that setting the header is not read: DRF
    would take it as it comes, and a client sending a new one each time would never be
    throttled."""
    if api_settings.NUM_PROXIES is None:
        return request.META.get("REMOTE_ADDR") or ""
    return BaseThrottle().get_ident(request)


class LLMChatThrottle(SimpleRateThrottle):
    """A rate per user (per client address when anonymous) for the ``scope``, read from
    ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` at each request; no rate, no limit."""

    scope = "llmchat"

    def __init__(self) -> None:  # the rate is read per request (override_settings works)
        self.rate = None

    def get_ident(self, request) -> str:
        return client_address(request)

    def allow_request(self, request, view) -> bool:
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        self.rate = rates.get(self.scope)
        if not self.rate:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request, view) -> str:
        user = getattr(request, "user", None)
        ident = user.pk if user is not None and user.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


class LLMChatRunThrottle(LLMChatThrottle):
    """The ``llmchat_runs`` scope: requests that start or resume a run (they cost money)."""

    scope = "llmchat_runs"


def token_throttle_rates() -> dict:
    """``LLMCHAT["TOKEN_THROTTLE_RATES"]`` over its defaults (``None``: no throttle)."""
    rates = settings.TOKEN_THROTTLE_RATES
    if rates is None:
        return {}
    return {**DEFAULTS["TOKEN_THROTTLE_RATES"], **rates}


def submitted_username(request) -> str | None:
    """The username a token request sends, as the throttle counts it: NFKC-normalised,
    case-folded and stripped, so ``Admin`` and ``ａｄｍｉｎ`` are ``admin``'s guesses."""
    data = request.data
    value = data.get("username") if isinstance(data, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        return None
    return unicodedata.normalize("NFKC", value).casefold().strip()


class TokenThrottle(SimpleRateThrottle):
    """A rate of ``POST auth/token/`` from ``LLMCHAT["TOKEN_THROTTLE_RATES"][kind]``,
    read at each request. Every attempt counts, failed or successful."""

    kind = ""

    def __init__(self) -> None:
        self.rate = None

    def allow_request(self, request, view) -> bool:
        self.rate = token_throttle_rates().get(self.kind)
        if not self.rate:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def ident(self, request) -> str | None:
        raise NotImplementedError

    def get_cache_key(self, request, view) -> str | None:
        ident = self.ident(request)
        if ident is None:
            return None
        # hashed: any text a client sends makes a key every cache backend takes
        digest = hashlib.sha256(ident.encode()).hexdigest()
        return self.cache_format % {"scope": self.scope, "ident": digest}


class TokenAddressThrottle(TokenThrottle):
    """Token requests per client address (:func:`client_address`): one client trying
    many usernames."""

    scope = "llmchat_token_address"
    kind = "address"

    def ident(self, request) -> str:
        return client_address(request)


class TokenUsernameThrottle(TokenThrottle):
    """Token requests per username sent (:func:`submitted_username`): one account's
    password guessed from many addresses. A request without a username is not counted
    here (the address throttle counts it)."""

    scope = "llmchat_token_username"
    kind = "username"

    def ident(self, request) -> str | None:
        return submitted_username(request)


def default_throttles(*, runs: bool = False) -> list:
    classes = [*api_settings.DEFAULT_THROTTLE_CLASSES, LLMChatThrottle]
    if runs:
        classes.append(LLMChatRunThrottle)
    return classes
