"""``manage.py llmchat_chat``: chat with a model in the terminal, replies streamed.

Every turn is stored like any other chat (see it in the admin). ``/quit`` or end of input
leaves; Ctrl-C during a reply stops it (nothing of the unfinished step is stored).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_llmchat.errors import LLMChatError
from django_llmchat.events import (
    GuardrailTripwire,
    Interrupt,
    ReasoningDelta,
    ReasoningDone,
    SkillActivation,
    TextDelta,
    ToolCallDone,
)
from django_llmchat.models import Chat, ToolCall
from django_llmchat.values import Cost, Tokens

DIM, BOLD, CYAN, RED, RESET = "\x1b[2m", "\x1b[1m", "\x1b[36m", "\x1b[31m", "\x1b[0m"

HELP = """Commands:
  /quit, /exit   leave (end of input does too)
  /usage         tokens and cost of the whole chat
  /help          this text
Ctrl-C during a reply stops it."""


def _tokens_text(tokens: Tokens) -> str:
    if tokens.is_empty:
        return "tokens: not reported"
    parts = [f"{tokens.input_tokens or 0:,} in", f"{tokens.output_tokens or 0:,} out"]
    if tokens.cache_read_tokens:
        parts.append(f"{tokens.cache_read_tokens:,} cached")
    if tokens.thinking_tokens:
        parts.append(f"{tokens.thinking_tokens:,} thinking")
    return "tokens: " + ", ".join(parts)


def _cost_text(cost: Cost) -> str:
    if cost.total is None:
        return "cost: unknown"
    return f"cost: ${cost.total:.6f}".rstrip("0").rstrip(".")


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _View:
    """What the screen shows while a run streams."""

    at_line_start: bool = False
    thinking: bool = False  # dim reasoning text is being printed
    pending: list[str] = field(default_factory=list)  # call ids whose results are not shown
    interrupt: Interrupt | None = None


class Command(BaseCommand):
    help = (
        "Chat with a model in the terminal: replies stream as they come, tool calls and "
        "results are shown, tokens and cost after each reply. /quit or end of input leaves."
    )
    stealth_options = ("stdin",)

    def add_arguments(self, parser):
        parser.add_argument("--chat", type=int, help="continue the chat with this id")
        parser.add_argument("--provider", help="provider name (default: LLMCHAT's)")
        parser.add_argument("--model", help="model id (default: LLMCHAT's)")
        parser.add_argument("--title", default="", help="title of a new chat")
        parser.add_argument(
            "--user",
            metavar="USERNAME",
            help="the owner of a new chat (its username), so it shows on their pages and API",
        )
        parser.add_argument(
            "--tool",
            action="append",
            default=[],
            dest="tools",
            metavar="NAME",
            help="enable a registered tool (repeatable)",
        )

    # -- output helpers -------------------------------------------------------------------
    def _paint(self, text: str, code: str) -> str:
        return f"{code}{text}{RESET}" if self.tty else text

    def _out(self, text: str) -> None:
        self.stdout.write(text, ending="")
        self.stdout.flush()

    def _line(self, text: str = "") -> None:
        self.stdout.write(text)
        self.stdout.flush()

    # -- setup ----------------------------------------------------------------------------
    def _chat(self, options: dict[str, Any]) -> Chat:
        provider, model = options.get("provider"), options.get("model")
        if options.get("chat"):
            try:
                chat = Chat.objects.get(pk=options["chat"])
            except Chat.DoesNotExist:
                raise CommandError(f"There is no chat with id {options['chat']}.") from None
            if options.get("user") and chat.user_id != self._user(options["user"]).pk:
                raise CommandError(f"Chat {chat.pk} does not belong to {options['user']!r}.")
            if model:
                chat.with_model(model, provider=provider)
            elif provider:
                chat.with_model(chat.model_id, provider=provider)
        else:
            fields: dict[str, Any] = {"title": options.get("title") or "Terminal chat"}
            if options.get("user"):
                fields["user"] = self._user(options["user"])
            if provider:
                fields["provider"] = provider
            if model:
                fields["model_id"] = model
            chat = Chat.objects.create(**fields)
        if options.get("tools"):
            chat.with_tools(*options["tools"])
        return chat

    @staticmethod
    def _user(username: str) -> Any:
        from django.contrib.auth import get_user_model

        model = get_user_model()
        try:
            return model._default_manager.get_by_natural_key(username)
        except model.DoesNotExist:
            raise CommandError(f"There is no user {username!r} (--user).") from None

    def _read(self, prompt: str) -> str | None:
        """One line of input without its newline; ``None`` at end of input."""
        if self.stdin is sys.stdin and sys.stdin.isatty():
            try:
                import readline  # noqa: F401  (line editing and history for input())
            except ImportError:
                pass
            try:
                return input(prompt)
            except EOFError:
                return None
        self._out(prompt)
        line = self.stdin.readline()
        if not line:
            return None
        return line.rstrip("\r\n")

    # -- the loop -------------------------------------------------------------------------
    def handle(self, *args: Any, **options: Any) -> None:
        self.stdin = options.get("stdin") or sys.stdin
        self.tty = self.stdout.isatty()
        chat = self._chat(options)
        self._line(
            self._paint(f"Chat {chat.pk} with {chat.provider}/{chat.model_id}", BOLD)
            + ". /help for commands, /quit to leave."
        )
        while True:
            try:
                line = self._read(self._paint("you> ", CYAN))
            except KeyboardInterrupt:
                self._line()
                break
            if line is None:
                self._line()
                break
            text = line.strip()
            if not text:
                continue
            if text in ("/quit", "/exit", "/q"):
                break
            if text == "/help":
                self._line(HELP)
                continue
            if text == "/usage":
                self._line(
                    f"chat {chat.pk}: {_tokens_text(chat.tokens)}, {_cost_text(chat.cost())}"
                )
                continue
            if text.startswith("/"):
                self._line(f"Unknown command {text.split()[0]}; /help lists them.")
                continue
            self._reply(chat, text)
        self._line(
            self._paint(
                f"Chat {chat.pk}: {_tokens_text(chat.tokens)}, {_cost_text(chat.cost())}.", DIM
            )
        )

    def _reply(self, chat: Chat, prompt: str | None) -> None:
        """Stream one reply (and its continuation after approvals), then print its usage."""
        last_usage = chat.usages.order_by("-id").values_list("id", flat=True).first() or 0
        self._out(self._paint("assistant> ", BOLD))
        interrupt = self._stream(chat, prompt)
        while interrupt is not None and interrupt.reason == "approval_required":
            decided = self._ask_approvals(chat)
            if decided is None:
                break
            self._out(self._paint("assistant> ", BOLD))
            interrupt = self._stream(chat, None, pending=decided)
        usage = chat.usages.filter(pk__gt=last_usage)
        self._line(
            self._paint(f"[{_tokens_text(usage.tokens())}, {_cost_text(usage.cost())}]", DIM)
        )

    def _stream(
        self, chat: Chat, prompt: str | None, pending: list[str] | None = None
    ) -> Interrupt | None:
        """Print the events of one run; returns its ``Interrupt``, if it ended with one.
        ``pending`` are call ids whose results this run will add (after approvals)."""
        view = _View(pending=list(pending or []))
        events = None
        try:
            if view.pending:
                self._line()
                view.at_line_start = True
            events = chat.stream(prompt)
            for event in events:
                self._show(chat, event, view)
            if view.pending:
                view.at_line_start = self._show_results(chat, view.pending, view.at_line_start)
        except KeyboardInterrupt:
            if events is not None:
                events.close()  # the run stops; nothing of the unfinished step is stored
            if view.thinking:
                self._out(RESET)
            self._line(self._paint("\n[stopped]", RED))
            return None
        except LLMChatError as exc:
            self._line(self._paint(f"\n[error: {exc}]", RED))
            return None
        if view.thinking:
            self._out(RESET)
        if not view.at_line_start:
            self._line()
        interrupt = view.interrupt
        if interrupt is not None and interrupt.reason != "approval_required":
            self._line(self._paint(f"[interrupted: {interrupt.reason}]", RED))
        return interrupt

    def _show(self, chat: Chat, event: Any, view: _View) -> None:
        """Print one event of a run, as ``view`` (what is on the screen) stands."""
        if view.pending and not isinstance(event, ToolCallDone):
            view.at_line_start = self._show_results(chat, view.pending, view.at_line_start)
        if view.thinking and not isinstance(event, ReasoningDelta):
            self._out(RESET)
            view.thinking = False
        if isinstance(event, TextDelta):
            self._out(event.content)
            view.at_line_start = event.content.endswith("\n")
        elif isinstance(event, ReasoningDelta):
            if self.tty:
                if not view.thinking:
                    self._out(DIM)
                    view.thinking = True
                self._out(event.content)
                view.at_line_start = event.content.endswith("\n")
        elif isinstance(event, ReasoningDone):
            if self.tty and not view.at_line_start:
                self._line()
                view.at_line_start = True
        elif isinstance(event, ToolCallDone):
            if not view.at_line_start:
                self._line()
            arguments = _short(event.arguments)
            self._line(self._paint(f"→ {event.name}({arguments})", CYAN))
            view.at_line_start = True
            view.pending.append(event.call_id)
        elif isinstance(event, SkillActivation):
            self._line(self._paint(f"\n[skill {event.name}]", DIM))
            view.at_line_start = True
        elif isinstance(event, GuardrailTripwire):
            reason = f": {event.reason}" if event.reason else ""
            self._line(self._paint(f"\n[blocked by {event.guardrail_id}{reason}]", RED))
            view.at_line_start = True
        elif isinstance(event, Interrupt):
            view.interrupt = event

    def _show_results(self, chat: Chat, pending: list[str], at_line_start: bool) -> bool:
        calls = ToolCall.objects.filter(chat=chat, call_id__in=pending).select_related("result")
        shown = []
        for call in calls:
            result = call.get_result()
            if result is None:
                continue
            if not at_line_start:
                self._line()
                at_line_start = True
            self._line(self._paint(f"← {call.name}: {_short(result.content)}", DIM))
            shown.append(call.call_id)
        pending[:] = [c for c in pending if c not in shown]
        return at_line_start

    def _ask_approvals(self, chat: Chat) -> list[str] | None:
        """Ask about every call waiting for approval; returns their call ids, or ``None``
        when input ended (the calls keep waiting: ``chat.approve`` can answer later)."""
        waiting = ToolCall.objects.filter(chat=chat, approval="", result__isnull=True)
        decided = []
        for call in waiting.order_by("id"):
            question = f"Allow {call.name}({_short(call.arguments)})? [y/N] "
            try:
                answer = self._read(self._paint(question, CYAN))
            except KeyboardInterrupt:
                answer = None
            if answer is None:
                self._line()
                return None
            if answer.strip().lower() in ("y", "yes"):
                chat.approve(call.call_id, resume=False)
            else:
                chat.deny(call.call_id, resume=False)
            decided.append(call.call_id)
        return decided
