"""``auth/token/``: a username and password exchanged for the user's API token."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from .base import LLMChatView
from .permissions import TokenAddressThrottle, TokenUsernameThrottle
from .responses import TOKEN_RULES, TOKEN_THROTTLED
from .schema import document

__all__ = ["TokenView"]


# DRF refuses a NUL in a string field: the schema says so
_CREDENTIAL = extend_schema_field({"type": "string", "minLength": 1, "pattern": "^[^\\x00]*$"})(
    type("CredentialField", (serializers.CharField,), {})
)


class TokenView(LLMChatView):
    """Exchange a username and password for the user's API token (created on first use),
    for clients that cannot use the session cookie: send it as
    ``Authorization: Bearer <token>`` (or ``Token <token>``). Needs
    ``rest_framework.authtoken`` in ``INSTALLED_APPS``."""

    permission_classes: list = []
    authentication_classes: list = []
    serializer_class = serializers.Serializer

    def get_authenticators(self):
        return []  # credentials are in the body: no session, so no CSRF check either

    def get_throttles(self):
        # the address first: it counts a request whose body the username throttle cannot read
        return [*super().get_throttles(), TokenAddressThrottle(), TokenUsernameThrottle()]

    def get_serializer_class(self):
        from rest_framework.authtoken.serializers import AuthTokenSerializer

        return AuthTokenSerializer

    @document(
        summary="Get an API token",
        request=inline_serializer(
            "Credentials",
            {"username": _CREDENTIAL(), "password": _CREDENTIAL()},
        ),
        responses={
            200: inline_serializer("TokenResponse", {"token": serializers.CharField()}),
            400: TOKEN_RULES,
            429: TOKEN_THROTTLED,
        },
        auth=[],
    )
    def post(self, request):
        from rest_framework.authtoken.models import Token
        from rest_framework.authtoken.serializers import AuthTokenSerializer

        serializer = AuthTokenSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        token, _ = Token.objects.get_or_create(user=serializer.validated_data["user"])
        return Response({"token": token.key})
