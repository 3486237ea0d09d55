"""``chats/{id}/messages/{message_id}/feedback/``: the requesting user's rating (+1 / -1)
and comment on an assistant reply: read it, give or change it, withdraw it."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiExample, extend_schema_field
from rest_framework import serializers, status
from rest_framework.response import Response

from ..errors import ArgumentError
from ..models import Feedback, Message
from ..models.feedback import COMMENT_MAX_LENGTH, RATINGS
from .base import LLMChatView
from .fields import StrictCharField, StrictFieldsMixin
from .responses import ERROR, refused
from .schema import document

__all__ = ["FeedbackSerializer", "FeedbackView"]


@extend_schema_field({"type": "integer", "enum": list(RATINGS)})
class RatingField(serializers.Field):
    """``1`` (thumbs up) or ``-1`` (thumbs down): a JSON integer, nothing else."""

    default_error_messages = {"invalid": "must be 1 or -1"}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int) or data not in RATINGS:
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class FeedbackRequestSerializer(StrictFieldsMixin, serializers.Serializer):
    """A rating and an optional comment."""

    rating = RatingField(help_text="1: thumbs up; -1: thumbs down.")
    comment = StrictCharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,  # stripped when stored; the bound is on what was sent
        max_length=COMMENT_MAX_LENGTH,
        help_text=f"What was good or wrong (at most {COMMENT_MAX_LENGTH} characters).",
    )


class FeedbackSerializer(serializers.ModelSerializer):
    """A user's feedback on a reply."""

    rating = RatingField(help_text="1: thumbs up; -1: thumbs down.")
    message = serializers.IntegerField(source="message_id", help_text="The reply's id.")
    user = serializers.IntegerField(
        source="user_id", allow_null=True, help_text="Who gave it (null: no user)."
    )

    class Meta:
        model = Feedback
        fields = ("message", "rating", "comment", "user", "created_at", "updated_at")
        read_only_fields = fields


FEEDBACK_RULES = refused("a message that is not an assistant reply (reported on `message`)")


class FeedbackView(LLMChatView):
    """The requesting user's feedback on one assistant reply of one of their chats."""

    serializer_class = FeedbackSerializer
    post_serializer_class = FeedbackRequestSerializer
    queryset = Feedback.objects.none()

    def _message(self, pk: int, message_id: int) -> Message:
        chat = self.get_chat(pk)
        message = Message.objects.filter(pk=message_id, chat=chat).only("id", "role").first()
        if message is None:
            raise Http404("No such message.")
        return message

    def _mine(self, message: Message) -> Feedback:
        row = Feedback.objects.of(message, self.request.user)
        if row is None:
            raise Http404("No feedback of yours on this message.")
        return row

    @document(
        summary="Read your feedback on a reply",
        responses={200: FeedbackSerializer, 404: ERROR},
    )
    def get(self, request, pk: int, message_id: int):
        row = self._mine(self._message(pk, message_id))
        return Response(FeedbackSerializer(row).data)

    @document(
        summary="Rate a reply",
        description="Gives (201) or changes (200) your rating of an assistant reply: "
        "`rating` 1 (thumbs up) or -1 (thumbs down), and an optional `comment` (a repeat "
        "without one clears it). One per user per reply. A fine-tuning export gives the "
        "turns of a reply rated -1 the weight 0.",
        request=FeedbackRequestSerializer,
        responses={200: FeedbackSerializer, 201: FeedbackSerializer, 400: FEEDBACK_RULES},
        examples=[
            OpenApiExample(
                "A thumbs down",
                value={"rating": -1, "comment": "The date is wrong."},
                request_only=True,
            )
        ],
    )
    def post(self, request, pk: int, message_id: int):
        message = self._message(pk, message_id)
        serializer = FeedbackRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        existed = Feedback.objects.of(message, request.user) is not None
        try:
            row = message.rate(data["rating"], data.get("comment", ""), user=request.user)
        except ArgumentError as exc:  # the rules the serializer does not hold (the role)
            field = getattr(exc, "field", "non_field_errors")
            raise serializers.ValidationError({field: [str(exc)]}) from None
        code = status.HTTP_200_OK if existed else status.HTTP_201_CREATED
        return Response(FeedbackSerializer(row).data, status=code)

    @document(summary="Withdraw your feedback on a reply", responses={204: None, 404: ERROR})
    def delete(self, request, pk: int, message_id: int):
        message = self._message(pk, message_id)
        if not message.unrate(user=request.user):
            raise Http404("No feedback of yours on this message.")
        return Response(status=status.HTTP_204_NO_CONTENT)
