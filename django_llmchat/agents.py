"""Agents: a class that declares a model, instructions, tools, guardrails, skills and a
step limit. A chat names its agent by dotted path, so any process can rebuild it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django.utils.module_loading import import_string

from .errors import ArgumentError, InterruptError


def interrupt(reason: str | None = None) -> None:
    """Stop the running loop from a tool or a callback; the run ends with
    ``Interrupt(reason=reason)`` and ``chat.complete()`` resumes it later."""
    raise InterruptError(reason)


class Agent:
    """Subclass and set the class attributes; all are optional."""

    model: ClassVar[str | None] = None
    provider: ClassVar[str | None] = None
    instructions: ClassVar[str | Callable[[Any], str] | None] = None
    tools: ClassVar[list[Any]] = []
    guardrails: ClassVar[list[Any]] = []
    skills: ClassVar[list[str]] = []
    """Folders holding skills (each a sub-folder with a ``SKILL.md``), or skill folders."""
    max_steps: ClassVar[int | None] = None
    schema: ClassVar[Any] = None
    params: ClassVar[dict[str, Any]] = {}
    history: ClassVar[str | dict[str, Any] | None] = None
    """What of the transcript each request sends (see ``LLMCHAT["HISTORY"]``); ``None``:
    the project's setting. A chat's own ``history`` wins."""

    @classmethod
    def path(cls) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"

    @classmethod
    def start_chat(cls, **fields: Any):
        """Create a Chat run by this agent (model, provider and schema from the agent).

        The chat stores the agent's dotted path, so the class must import from it: one
        defined in ``manage.py shell``, a script's ``__main__`` or a function is refused
        (``ArgumentError``) before any row is written."""
        from .models import Chat
        from .models.chat import schema_dict

        path = cls.path()
        try:
            found = import_string(path)
        except ImportError:
            found = None
        if found is not cls:
            raise ArgumentError(
                f"agent {cls.__qualname__} does not import from {path!r}: a chat names its "
                "agent by dotted path, so define the class in a module of your project "
                "(myproject/agents.py), not in a shell, a script or a function"
            )

        if cls.model:
            fields.setdefault("model_id", cls.model)
        if cls.provider:
            fields.setdefault("provider", cls.provider)
        if cls.schema is not None:
            fields.setdefault("schema", schema_dict(cls.schema))
        if cls.params:
            fields.setdefault("params", dict(cls.params))
        return Chat.objects.create(agent=path, **fields)

    def render_instructions(self, context: Any) -> str | None:
        value = self.instructions
        if callable(value):
            return value(context)
        return value

    def on_message(self, message: Any, context: Any) -> None:
        """Called after each stored assistant or tool message; may call ``interrupt()``."""


def load_agent(path: str) -> Agent:
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise ArgumentError(f"cannot import agent {path!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise ArgumentError(f"{path!r} is not an Agent subclass")
    return cls()
