"""Chat titles: an untitled chat (``title == ""``) gets one after its first reply.

``LLMCHAT["TITLES"]`` says how:

- ``True`` (the default): from the first prompt, with no provider call (its first line,
  whitespace collapsed, cut at a word boundary to :data:`MAX_CHARS` with an ellipsis);
- a model id (``"gpt-4.1-nano"``, on the chat's provider) or a dict ``{"model": ...,
  "provider": ..., "prompt": ...}`` (``provider`` and ``prompt`` optional: the chat's
  provider, :data:`TITLE_PROMPT`): that model writes it, in one request with its own usage
  row (``operation="title"``), counted by the spending limits; when that call fails or a
  limit is reached, the title comes from the first prompt;
- ``False`` or ``None``: chats keep the title they are given.

The title is written after the run's terminal event (:class:`~django_llmchat.loop.session.
RunSession`, whichever driver iterates it: ``ask()``, ``stream()``, the SSE streams, the
Celery task) by one conditional UPDATE that never replaces a title of the user's
(``title_source == "user"``), even one set while the title was being written.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from ..conf import settings

__all__ = [
    "MAX_CHARS",
    "MODEL",
    "PROMPT",
    "TITLE_PROMPT",
    "USER",
    "TitleOptions",
    "prompt_title",
    "title_chat",
    "title_options",
]

logger = logging.getLogger("django_llmchat.chats.titles")

USER, MODEL, PROMPT = "user", "model", "prompt"
"""The values of ``Chat.title_source`` (``""``: untitled)."""

MAX_CHARS = 60
"""The longest automatic title, its ellipsis included."""

TITLE_PROMPT = (
    "Write a title of at most six words for the conversation below, in the language of "
    "the user's message. Answer with the title alone: no quotes, no final period."
)
KEYS = ("model", "provider", "prompt")
# what of the conversation the title model reads, in characters
_PROMPT_CHARS, _REPLY_CHARS = 2000, 1000


@dataclass(frozen=True)
class TitleOptions:
    """``LLMCHAT["TITLES"]``, read: ``model`` ``None`` titles from the prompt."""

    model: str | None = None
    provider: str | None = None
    prompt: str = TITLE_PROMPT


def title_options(value: Any = None, *, read: bool = True) -> TitleOptions | None:
    """The options of ``LLMCHAT["TITLES"]`` (or of ``value``); ``None`` when titles are
    off. A value :func:`setting_errors` refuses is taken as the default (the system check
    reports it)."""
    if read:
        value = settings.TITLES
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip():
        return TitleOptions(model=value.strip())
    if isinstance(value, dict) and not setting_errors(value):
        return TitleOptions(
            model=value["model"].strip(),
            provider=value.get("provider") or None,
            prompt=value.get("prompt") or TITLE_PROMPT,
        )
    return TitleOptions()


def setting_errors(value: Any, providers: set[str] | None = None) -> list[tuple[str, str]]:
    """Problems of a ``LLMCHAT["TITLES"]`` value: ``(check id, sentence)`` pairs,
    ``llmchat.E064`` for its shape, ``llmchat.E065`` for a provider not in ``providers``
    (the known and configured names; unchecked when ``None``)."""
    where = 'LLMCHAT["TITLES"]'
    if value is None or isinstance(value, bool):
        return []
    if isinstance(value, str):
        return [] if value.strip() else [("llmchat.E064", f"{where} is an empty model id")]
    if not isinstance(value, dict):
        return [
            (
                "llmchat.E064",
                f"{where} must be True, False, None, a model id or a dict with 'model', "
                f"got {type(value).__name__}",
            )
        ]
    errors = [
        ("llmchat.E064", f"{where}[{key!r}] is not a title option (use {', '.join(KEYS)})")
        for key in value
        if key not in KEYS
    ]
    model = value.get("model")
    if not isinstance(model, str) or not model.strip():
        errors.append(("llmchat.E064", f"{where}['model'] must be a non-empty model id"))
    prompt = value.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        errors.append(("llmchat.E064", f"{where}['prompt'] must be a non-empty string"))
    provider = value.get("provider")
    if provider is not None and (not isinstance(provider, str) or not provider):
        errors.append(("llmchat.E064", f"{where}['provider'] must be a provider name"))
    elif provider is not None and providers is not None and provider not in providers:
        errors.append(("llmchat.E065", f"{where}['provider'] is {provider!r}, not a provider"))
    return errors


# markdown a title leaves out: a heading, quote or list marker, emphasis, code, a link's URL
_BLOCK_MARK = re.compile(r"^\s*(?:#{1,6}|>|[-*+]|\d+[.)])\s+")
_EMPHASIS = re.compile(r"(?<!\w)(\*\*|__|\*|_|~~)(?=\S)(.+?)(?<=\S)\1(?!\w)")
_CODE = re.compile(r"`+([^`]+)`+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


def prompt_title(text: str, limit: int = MAX_CHARS) -> str:
    """The title a prompt gives: its first non-blank line as plain text (markdown markers
    left out), whitespace collapsed, cut at a word boundary to ``limit`` characters, an
    ellipsis included (``""`` for a blank prompt)."""
    line = next((part for part in (text or "").splitlines() if part.strip()), "")
    line = _BLOCK_MARK.sub("", line)
    parts = _CODE.split(_LINK.sub(r"\1", line))  # odd parts: code, kept as written
    line = "".join(p if i % 2 else _EMPHASIS.sub(r"\2", p) for i, p in enumerate(parts))
    line = " ".join(line.split())
    if len(line) <= limit:
        return line
    head = line[:limit]  # one past the room the ellipsis leaves: tells a word's end
    space = head.rfind(" ")
    cut = head[:space] if space >= limit // 3 else head[: limit - 1]
    return cut.rstrip(" ,.;:!?-") + "…"


def model_title(text: str) -> str:
    """The title in a title model's answer: its first line, without a ``Title:`` label,
    quotes or markdown, cut as :func:`prompt_title` (``""`` when nothing is left)."""
    line = prompt_title(text, limit=10_000)
    if line.lower().startswith("title:"):
        line = line[len("title:") :]
    line = line.strip().strip("*#_`\"'“”‘’«» ").rstrip(".").strip()
    return prompt_title(line)


# -- after a run ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplyTitle:
    """An automatic title a run stores with its last reply (:func:`title_with_reply`)."""

    text: str
    source: str

    def written(self, chat) -> None:
        """The title was stored on ``chat``'s row: the instance follows."""
        chat._title_written(self.text, self.source)


def title_with_reply(runner) -> ReplyTitle | None:
    """The title an untitled chat's run stores with its last reply, in the same call or
    transaction (no statement of its own): its first prompt's title, when
    titles are on without a model and that prompt is in the history the run sent.
    ``None`` otherwise: :func:`title_chat` writes the title after the run (a model's
    title needs the reply). Never raises."""
    chat = runner.chat
    try:
        options = title_options()
        if options is None or options.model is not None or chat.title:
            return None
        if getattr(chat, "title_source", "") == USER or chat.pk is None:
            return None
        history = getattr(runner.history, "messages", None) or []
        first = next((m.content for m in history if m.role == "user" and m.content.strip()), "")
        title = prompt_title(first)
        return ReplyTitle(title, PROMPT) if title else None
    except Exception:
        logger.exception("chat %s: could not make its title", chat.pk)
        return None


def title_chat(runner) -> str | None:
    """Give ``runner``'s chat a title after the run that stored its first reply: the
    title written, or ``None`` (titles off, the chat titled already or by its user
    meanwhile, no reply). Never raises: the reply is stored whatever happens here."""
    chat = runner.chat
    try:
        options = title_options()
        if options is None or chat.title or getattr(chat, "title_source", "") == USER:
            return None
        reply = runner.result.message
        if reply is None or chat.pk is None:
            return None
        first = _first_prompt(runner)
        title, source = "", PROMPT
        if options.model is not None:
            title = _from_model(runner, options, first, reply.content or "")
            source = MODEL
        if not title:
            title, source = prompt_title(first), PROMPT
        if not title:
            return None
        return title if write_title(chat, title, source) else None
    except Exception:
        logger.exception("chat %s: could not write its title", chat.pk)
        return None


def write_title(chat, title: str, source: str) -> bool:
    """Write an automatic ``title`` on ``chat`` if it is still untitled and its title is
    not the user's: one conditional UPDATE, so a title the user set meanwhile stays.
    ``chat`` (the instance) follows when it was written."""
    from django.db.models import Q

    from ..models import Chat

    written = (
        Chat.objects.filter(pk=chat.pk, title="")
        .filter(~Q(title_source=USER))
        .update(title=title[:255], title_source=source)
    )
    if written:
        chat._title_written(title, source)
    return bool(written)


def _first_prompt(runner) -> str:
    """The chat's first prompt: the first one of the history the run sent (no query),
    else the first of the active path."""
    from ..models import Message

    history = getattr(runner.history, "messages", None) or []
    for message in history:
        if message.role == "user" and message.content.strip():
            return message.content
    first = (
        Message.objects.filter(chat_id=runner.chat.pk, role="user", on_path=True)
        .order_by("position", "id")
        .only("content")
        .first()
    )
    return first.content if first is not None else ""


def _from_model(runner, options: TitleOptions, prompt: str, reply: str) -> str:
    """The title model's title of the conversation, billed on the ledger; ``""`` when it
    failed (its attempt is marked failed), wrote nothing, or a spending limit is
    reached."""
    from ..errors import BudgetExceededError, ProviderError
    from ..loop.attempts import Received
    from ..loop.steps import record_failed_attempts, usage_row, write_attempts
    from ..models import Usage
    from ..providers import get_provider
    from ..providers.types import ProviderMessage, ProviderRequest
    from ..runs import limits

    chat = runner.chat
    provider_name = options.provider or chat.provider
    model_id = options.model
    try:
        limits.check(chat)
    except BudgetExceededError as exc:
        logger.info("chat %s: titled from its prompt: %s", chat.pk, exc)
        return ""
    run_id = runner.execution.pk if runner.execution is not None else None
    conversation = f"User: {prompt[:_PROMPT_CHARS]}"
    if reply:
        conversation += f"\n\nAssistant: {reply[:_REPLY_CHARS]}"
    request = ProviderRequest(
        model_id=model_id,
        messages=[
            ProviderMessage(role="system", content=options.prompt),
            ProviderMessage(role="user", content=conversation),
        ],
        params={"max_tokens": 32},
        chat=chat,  # what LLMCHAT["REDACT"] is told of
    )
    started = time.monotonic()
    pending = None
    try:
        provider = (
            runner.provider if provider_name == chat.provider else get_provider(provider_name)
        )
        pending = runner.attempts.open_attempt(request, provider_name, model_id, operation="title")
        response = provider.complete(request)
    except Exception as exc:
        if pending is None and not isinstance(exc, ProviderError):
            # no call was made (its provider cannot be built): nothing to bill
            logger.warning("chat %s: no title model call, titled from the prompt: %s", chat.pk, exc)
            return ""
        failed = usage_row(
            chat,
            provider=provider_name,
            model_id=model_id,
            status=Usage.FAILED,
            started=started,
            error=_error_text(exc),
            run_id=run_id,
        )
        failed.operation = "title"
        record_failed_attempts([runner.attempts.close_attempt(pending, failed)])
        logger.warning("chat %s: the title model failed, titled from the prompt: %s", chat.pk, exc)
        return ""
    tokens, estimated = runner.attempts.billed(pending, Received(), response)
    usage = usage_row(
        chat,
        provider=provider_name,
        model_id=response.model_id or model_id,
        status=Usage.SUCCEEDED,
        tokens=tokens,
        started=started,
        first_token=time.monotonic(),
        run_id=run_id,
    )
    usage.operation, usage.estimated = "title", estimated
    write_attempts([runner.attempts.close_attempt(pending, usage, response)])
    return model_title(response.content or "")


def _error_text(exc: BaseException) -> str:
    from ..errors import ProviderError

    return str(exc) if isinstance(exc, ProviderError) else f"{type(exc).__name__}: {exc}"
