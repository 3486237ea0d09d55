"""The chat's builder: the ``with_*`` methods, each saving and returning the chat so calls
chain (``chat.with_instructions("Be terse.").with_tools(weather)``). On a chat not saved
yet (``Chat(...)``) they only set its fields: its first prompt saves them with it (or
``save()``); ``with_instructions``, which writes a message, saves the chat first."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ..errors import ArgumentError
from .llm_model import find_model


def tool_name(tool: Any) -> str:
    """The registered name of a tool given as a name, a tool object or a function."""
    if isinstance(tool, str):
        name = tool
    else:
        name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
    if not name or not isinstance(name, str):
        raise ArgumentError(f"cannot tell the name of tool {tool!r}")
    return name


def schema_dict(schema: Any) -> dict[str, Any] | None:
    """A JSON Schema dict from a dict or a pydantic model class (``None`` clears)."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        return schema
    json_schema = getattr(schema, "model_json_schema", None)
    if callable(json_schema):
        return json_schema()
    raise ArgumentError(
        f"schema must be a JSON Schema dict or a pydantic model class, got {type(schema).__name__}"
    )


class ChatBuilder:
    """``with_instructions``, ``with_model``, ``with_tools``, ``with_temperature``,
    ``with_params``, ``with_history``, ``with_schema`` and ``cache_until_here``: a mixin of
    :class:`~django_llmchat.models.AbstractChat`."""

    def _keep(self, fields: list[str]) -> None:
        """Save ``fields``: now on a saved chat, with the chat on an unsaved one."""
        if self.pk is not None:
            self.save(update_fields=fields)

    def with_instructions(self, text: str | None, *, append: bool = False):
        """Set the system instructions: replace them (default), ``append=True`` to add one
        more, ``None`` to clear them."""
        with transaction.atomic():
            if self.pk is None:
                self.save()
            if not append or text is None:
                # summaries (system rows too) are history, not instructions
                self.messages.filter(role="system", summary_until__isnull=True).delete()
            if text is not None:
                self.add_message(role="system", content=text)
        return self

    def with_model(self, model_id: str, provider: str | None = None):
        """Switch model (and provider). Without ``provider``, the registry's provider for
        that model is used when known, else the current one is kept."""
        if not model_id:
            raise ArgumentError("model_id must not be empty")
        if provider is None:
            info = find_model(model_id)
            provider = info.provider if info else self.provider
        self.model_id, self.provider = model_id, provider
        self._keep(["model_id", "provider", "updated_at"])
        return self

    def with_tools(self, *tools: Any, replace: bool = False):
        """Enable tools by name (strings, ``@tool`` functions or tool objects)."""
        names = [tool_name(t) for t in tools]
        current = [] if replace else list(self.tools or [])
        self.tools = current + [n for n in names if n not in current]
        self._keep(["tools", "updated_at"])
        return self

    def with_temperature(self, temperature: float):
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise ArgumentError(f"temperature must be a number, got {temperature!r}")
        if not 0 <= temperature <= 2:
            raise ArgumentError(f"temperature must be between 0 and 2, got {temperature}")
        return self.with_params(temperature=temperature)

    def with_params(self, **params: Any):
        """Merge request parameters (``max_tokens``, vendor options under the vendor's name)."""
        self.params = {**(self.params or {}), **params}
        self._keep(["params", "updated_at"])
        return self

    def with_history(self, history: Any):
        """Choose what of the transcript each request sends: ``"all"``, ``"window"``,
        ``"summarize"``, the dotted path of a history processor, or a dict of history
        options (``{"strategy": "summarize", "keep": 0.4}``); ``None`` goes back to the
        agent's or the project's ``LLMCHAT["HISTORY"]``."""
        if history is not None:
            from ..loop.history_policy import history_errors

            problems = history_errors(history)
            if problems:
                raise ArgumentError(f"history: {problems[0]}")
        self.history = history
        self._keep(["history", "updated_at"])
        return self

    def with_schema(self, schema: Any):
        """Ask for structured output: a JSON Schema dict or a pydantic model class."""
        self.schema = schema_dict(schema)
        self._keep(["schema", "updated_at"])
        return self

    def cache_until_here(self):
        """Mark the latest message as the end of the cacheable prefix."""
        last = self.messages.filter(on_path=True).order_by("-position", "-id").first()
        if last is None:
            raise ArgumentError("the chat has no message to mark as a cache boundary")
        last.cache_until_here()
        return self
