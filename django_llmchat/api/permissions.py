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
  when ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` gives them a rate.
"""

from __future__ import annotations

from django.apps import apps
from django.db.models import QuerySet
from rest_framework.authentication import (
    SessionAuthentication,
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.permissions import IsAuthenticated
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from ..conf import settings
from ..models import Chat

__all__ = [
    "BearerTokenAuthentication",
    "ChatAccess",
    "LLMChatRunThrottle",
    "LLMChatThrottle",
    "chats_for",
    "default_authenticators",
    "default_throttles",
]


def chats_for(user) -> QuerySet:
    """The chats ``user`` may see (none for an anonymous user)."""
    qs = Chat.objects.all()
    if not user or not user.is_authenticated:
        return qs.none()
    if user.is_staff and settings.STAFF_SEES_ALL_CHATS:
        return qs
    return qs.filter(user=user)


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


class LLMChatThrottle(SimpleRateThrottle):
    """A rate per user (per client address when anonymous) for the ``scope``, read from
    ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` at each request; no rate, no limit."""

    scope = "llmchat"

    def __init__(self) -> None:  # the rate is read per request (override_settings works)
        self.rate = None

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


def default_throttles(*, runs: bool = False) -> list:
    classes = [*api_settings.DEFAULT_THROTTLE_CLASSES, LLMChatThrottle]
    if runs:
        classes.append(LLMChatRunThrottle)
    return classes
