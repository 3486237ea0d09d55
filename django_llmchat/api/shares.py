"""``chats/{id}/fork/``: a new chat holding a path of a chat; ``chats/{id}/share/``: a
read-only link to a snapshot of the active path; ``shared/{token}/``: that snapshot,
served without login (HTML for a browser, JSON when asked)."""

from __future__ import annotations

import json

from django.template.loader import render_to_string
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response

from ..chats import shares
from ..errors import ArgumentError
from ..models import Chat, ChatShare
from .base import LLMChatView
from .fields import StrictFieldsMixin
from .responses import ERROR, refused
from .schema import document
from .serializers import ChatSerializer

__all__ = [
    "ForkSerializer",
    "ForkView",
    "ShareSerializer",
    "ShareView",
    "SharedPageRenderer",
    "SharedView",
]


class ForkSerializer(StrictFieldsMixin, serializers.Serializer):
    """The message the fork's transcript ends with."""

    message = serializers.IntegerField(
        min_value=1,
        max_value=2**63 - 1,
        help_text="The id of a message of any branch of the chat: the fork holds the path "
        "from the first message to it.",
    )


FORK_RULES = refused(
    "a `message` that is no message of a branch of the chat (another chat's, a system "
    "message, a prompt still queued), or one whose tool calls are unanswered with nothing "
    "before it"
)


class ForkView(LLMChatView):
    """Fork a chat at a message."""

    serializer_class = ChatSerializer
    post_serializer_class = ForkSerializer
    queryset = Chat.objects.none()

    @document(
        summary="Fork a chat at a message",
        description="A new chat of the chat's user holding the path from the first message "
        "to `message` (of any branch): the messages with their tool calls and results and "
        "reasoning, attachments sharing the stored files, the chat's settings and "
        "instructions; no usage (the fork's totals start at zero). When `message` leaves "
        "tool calls unanswered, the copy ends before the message that made them. Answers "
        "the new chat; its `forked_from` and `forked_from_message` name the source.",
        request=ForkSerializer,
        responses={201: ChatSerializer, 400: FORK_RULES, 404: ERROR},
    )
    def post(self, request, pk: int):
        chat = self.get_chat(pk)
        serializer = ForkSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            fork = chat.fork(serializer.validated_data["message"])
        except ArgumentError as exc:
            raise ValidationError({"message": [str(exc)]}) from None
        fork = Chat.objects.with_totals().get(pk=fork.pk)
        data = ChatSerializer(fork, context=self.get_serializer_context()).data
        return Response(data, status=status.HTTP_201_CREATED)


class ShareSerializer(StrictFieldsMixin, serializers.Serializer):
    """What the shared snapshot shows besides the messages."""

    include = serializers.ListField(
        child=serializers.ChoiceField(choices=list(shares.INCLUDES)),
        required=False,
        max_length=len(shares.INCLUDES),
        help_text='"thinking": each reply\'s reasoning; "tools": the tool calls\' arguments '
        "and the tool results (without it, a reply shows the names of the tools it "
        "called alone).",
    )


ShareCreated = inline_serializer(
    "ShareCreated",
    {
        "url": serializers.URLField(
            help_text="The link: anyone with it reads the snapshot, without logging in."
        ),
        "include": serializers.ListField(child=serializers.CharField()),
        "message_count": serializers.IntegerField(),
        "created_at": serializers.DateTimeField(),
    },
)


class ShareView(LLMChatView):
    """Make or revoke the read-only links of a chat."""

    serializer_class = ShareSerializer
    queryset = ChatShare.objects.none()

    @document(
        summary="Share a snapshot of the chat",
        description="Stores what the active path says now (no instructions; reasoning and "
        "tool arguments only with `include`) and answers its link: `url`, served without "
        "login under this API (HTML, or JSON with `Accept: application/json` or "
        "`?format=json`). Later messages do not reach it. The link is shown once (only "
        "its token's hash is stored): share again for a new one.",
        request=ShareSerializer,
        responses={201: ShareCreated, 400: ERROR, 404: ERROR},
    )
    def post(self, request, pk: int):
        chat = self.get_chat(pk)
        serializer = ShareSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        share, token = shares.share_chat(chat, serializer.validated_data.get("include"))
        url = request.build_absolute_uri(reverse("llmchat-api:shared", kwargs={"token": token}))
        return Response(
            {
                "url": url,
                "include": share.include,
                "message_count": share.message_count,
                "created_at": serializers.DateTimeField().to_representation(share.created_at),
            },
            status=status.HTTP_201_CREATED,
        )

    @document(
        summary="Revoke the chat's share links",
        description="Deletes every share of the chat: their links answer 404 from now on.",
        responses={204: None, 404: ERROR},
    )
    def delete(self, request, pk: int):
        shares.revoke_shares(self.get_chat(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SharedPageRenderer(BaseRenderer):
    """The snapshot as a small HTML page (a link that is not valid: a page saying so)."""

    media_type = "text/html"
    format = "html"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        response = (renderer_context or {}).get("response")
        code = getattr(response, "status_code", 200)
        context = {"share": _page(data) if code == 200 else None, "status": code}
        return render_to_string("django_llmchat/shared.html", context)


def _page(data: dict) -> dict:
    """The snapshot as the template shows it: tool arguments as indented JSON text."""
    messages = []
    for message in data.get("messages", []):
        calls = [
            {**call, "arguments_json": json.dumps(call["arguments"], indent=2, ensure_ascii=False)}
            if "arguments" in call
            else call
            for call in message.get("tool_calls", [])
        ]
        messages.append({**message, "tool_calls": calls})
    return {**data, "messages": messages}


# what the page may load: its own inline styles, nothing else (no script, no image)
_PAGE_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)

SharedSnapshot = inline_serializer(
    "SharedSnapshot",
    {
        "title": serializers.CharField(),
        "model_id": serializers.CharField(),
        "include": serializers.ListField(child=serializers.CharField()),
        "messages": serializers.ListField(child=serializers.DictField()),
        "shared_at": serializers.DateTimeField(),
    },
)


class SharedView(LLMChatView):
    """A shared snapshot, for anyone with its link."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    renderer_classes = [SharedPageRenderer, JSONRenderer]
    queryset = ChatShare.objects.none()

    def get_authenticators(self):
        return []  # no login: the link is the key

    @document(
        summary="Read a shared snapshot (no login)",
        description="HTML by default, JSON with `Accept: application/json` or "
        "`?format=json`: the title, the model and the messages (role, content, time, "
        "model, attachments' names; `thinking`, `tool_calls` and tool results as the "
        "share's `include` says). 404 for a link revoked or never made.",
        auth=[],
        responses={
            (200, "application/json"): SharedSnapshot,
            (200, "text/html"): OpenApiResponse(
                response=OpenApiTypes.STR, description="The snapshot as a page."
            ),
            (400, "application/json"): ERROR,
            (404, "application/json"): ERROR,
            (404, "text/html"): OpenApiResponse(
                response=OpenApiTypes.STR, description="A page saying the link is not valid."
            ),
        },
    )
    def get(self, request, token: str):
        share = shares.find_share(token)
        if share is None:
            raise NotFound("No such share link (revoked, or never made).")
        return Response(share.to_dict())

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if response.status_code not in (200, 404):
            # a refusal (a bad ``format``, a throttle) is JSON, as every route's
            response.accepted_renderer = JSONRenderer()
            response.accepted_media_type = "application/json"
        response["Cache-Control"] = "private, no-store"
        response["X-Robots-Tag"] = "noindex, nofollow"
        response["Referrer-Policy"] = "no-referrer"  # the link is the key: never sent on
        response["Content-Security-Policy"] = _PAGE_POLICY
        response["Vary"] = "Accept"
        return response
