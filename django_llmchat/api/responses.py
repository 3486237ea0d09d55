"""The answers the views document in the OpenAPI schema beside their serializers: event
streams, errors, and the refusals of rules the schema cannot state."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse

__all__ = [
    "BUDGET",
    "CHAT_RULES",
    "ERROR",
    "KEY_REFUSED",
    "MESSAGE_RULES",
    "SSE_RESPONSE",
    "TOKEN_RULES",
    "TOKEN_THROTTLED",
    "UI_RULES",
    "UI_STREAM_RESPONSE",
    "refused",
]

SSE_RESPONSE = OpenApiResponse(
    response=OpenApiTypes.STR,
    description=(
        "Server-Sent Events: `event: <type>` / `data: <JSON>` / `id: <n>` frames: "
        "`run_started`, the loop's events (`text_delta`, `tool_call_done`, "
        "`token_usage_done`, ...), an `error` event with a safe message if the run fails, "
        "then `run_finished`."
    ),
)
UI_STREAM_RESPONSE = OpenApiResponse(
    response=OpenApiTypes.STR,
    description="The AI SDK's UI message stream (v1): `data: <chunk JSON>` frames "
    "(`start`, `start-step`, `text-start`/`text-delta`/`text-end`, reasoning, "
    "`tool-input-start`/`tool-input-delta`/`tool-input-available`, "
    "`tool-approval-request`, `tool-output-available`/`tool-output-error`/"
    "`tool-output-denied`, `message-metadata`, `finish-step`, `finish`, `error`), then "
    "`data: [DONE]`.",
)
ERROR = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description='An error: `{"detail": ...}`, or `{"<field>": ["<reason>", ...]}` for '
    "invalid input.",
)


KEY_REFUSED = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description="An `Idempotency-Key` that is not 1 to 255 printable ASCII characters: "
    '`{"Idempotency-Key": ["<reason>"]}`.',
)


def refused(rules: str) -> OpenApiResponse:
    """A 400 that also answers requests the schema allows but a rule refuses."""
    return OpenApiResponse(
        response=OpenApiTypes.OBJECT,
        description='Invalid input: `{"<field>": ["<reason>", ...]}`. Also refused with this '
        f"status although the schema allows them: {rules}.",
    )


# what each route refuses although the schema allows it: the rules of django_llmchat.inputs
CHAT_RULES = refused(
    "a `history` naming a strategy or an `estimator` that is neither built in nor "
    'registered (`LLMCHAT["HISTORY_PROCESSORS"]`, `["TOKEN_ESTIMATORS"]`; a dotted path '
    "never is), or a `summary_provider` that is not configured, or a `summary_model` "
    '`LLMCHAT["ALLOWED_MODELS"]` leaves out; a `provider` that is not configured, a blank '
    "`model_id` or one `ALLOWED_MODELS` leaves out; `params` a provider cannot take "
    "(vendor options outside its allowlist, or `max_tokens` above the model's output "
    "limit, also the chat's own when `model_id` or `provider` changes); reserved "
    "`context` keys, unregistered or too many `tools`"
)
MESSAGE_RULES = refused(
    'a `content` of whitespace only or longer than `LLMCHAT["MAX_CONTENT_LENGTH"]`, '
    'more files than `LLMCHAT["MAX_ATTACHMENTS"]`, an empty file, one over '
    '`LLMCHAT["MAX_ATTACHMENT_SIZE"]`, or one whose type sniffed from its bytes is not in '
    '`LLMCHAT["ALLOWED_ATTACHMENT_TYPES"]` (or is not the type it claims)'
)
TOKEN_RULES = refused("a username and password that do not log in")
TOKEN_THROTTLED = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description="Too many attempts for this username or from this client address "
    '(`LLMCHAT["TOKEN_THROTTLE_RATES"]`), failed or not; `Retry-After` says when to try '
    'again: `{"detail", "code": "throttled"}`.',
)
UI_RULES = refused(
    "the rules of a REST message, reported on `messages`: a new user message with neither "
    'text nor a file part, text longer than `LLMCHAT["MAX_CONTENT_LENGTH"]`, too many, '
    "empty, too large or disallowed files (typed by their bytes); a file part whose `url` "
    "is not a base64 `data:` URL; an `id` with characters a resume URL cannot carry, or "
    "naming no chat of yours while the project's default provider is not configured (or "
    "its default model not allowed): no chat is made; an "
    "approval whose `id` no tool call can have (a control character, over 255 characters)"
)

BUDGET = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description="A spending limit is reached (`Retry-After` says when it frees up): "
    '`{"detail", "code": "budget_exceeded", "limit", "used", "allowed", "resets_at"}`; or '
    'throttled: `{"detail", "code": "throttled"}`.',
)
