"""The runtime context a run carries and tools receive.

Caller keys are read hash-style (``context["user_id"]``, ``context.dig("a", "b")``); the
framework-owned keys ``skills`` and ``token_usage`` are typed attributes that callers
cannot pass in.
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import ArgumentError
from .values import Tokens


class Context:
    """Typed wrapper around the context dict of a run."""

    RESERVED_KEYS = ("skills", "token_usage")

    def __init__(self, data: dict[str, Any] | None = None, **kwargs: Any):
        data = {**(data or {}), **kwargs}
        if not isinstance(data, dict):
            raise ArgumentError(f"context data must be a dict, got {type(data).__name__}")
        reserved = [k for k in data if k in self.RESERVED_KEYS]
        if reserved:
            raise ArgumentError(f"Reserved keys cannot be passed in context: {', '.join(reserved)}")
        self._data: dict[str, Any] = dict(data)
        self._data["skills"] = None
        self._data["token_usage"] = None

    def __repr__(self) -> str:
        return f"Context({self.caller_data()!r})"

    # -- hash-style reads -----------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self._data.get(key)

    def __setitem__(self, key: str, value: Any) -> None:
        """Set a caller key (tools may record facts; they persist on ``Chat.context``)."""
        if key in self.RESERVED_KEYS:
            raise ArgumentError(f"{key} is reserved: set it through context.{key} = ...")
        self._data[key] = value

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def dig(self, *keys: Any) -> Any:
        """Follow ``keys`` through nested dicts and lists; ``None`` when a step is missing."""
        value: Any = self._data
        for key in keys:
            if isinstance(value, dict):
                value = value.get(key)
            elif isinstance(value, list | tuple) and isinstance(key, int):
                value = value[key] if -len(value) <= key < len(value) else None
            else:
                return None
            if value is None:
                return None
        return value

    # -- framework-owned keys -------------------------------------------------------------
    @property
    def skills(self):
        """The resolved :class:`~django_llmchat.skills.SkillsContext`, or ``None``."""
        return self._data["skills"]

    @skills.setter
    def skills(self, value: Any) -> None:
        from .skills import SkillsContext

        if value is not None and not isinstance(value, SkillsContext):
            raise ArgumentError(
                f"skills must be a django_llmchat.skills.SkillsContext or None, "
                f"got {type(value).__name__}"
            )
        self._data["skills"] = value

    @property
    def token_usage(self) -> Tokens | None:
        """Running token total across the chat's runs, or ``None`` before the first reply."""
        loader = self.__dict__.pop("_token_usage_loader", None)
        if loader is not None:
            self._data["token_usage"] = loader()
        return self._data["token_usage"]

    @token_usage.setter
    def token_usage(self, value: Tokens | None) -> None:
        if value is not None and not isinstance(value, Tokens):
            raise ArgumentError(
                f"token_usage must be a django_llmchat.values.Tokens or None, "
                f"got {type(value).__name__}"
            )
        self.__dict__.pop("_token_usage_loader", None)
        self._data["token_usage"] = value

    @property
    def token_usage_deferred(self) -> bool:
        return "_token_usage_loader" in self.__dict__

    def defer_token_usage(self, loader) -> None:
        """Compute ``token_usage`` with ``loader()`` on first read (it may query)."""
        self.__dict__["_token_usage_loader"] = loader

    # -- copies ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A copy of the underlying dict (reserved keys included); mutating it changes
        nothing here."""
        self.token_usage  # resolve a deferred value  # noqa: B018
        return dict(self._data)

    def caller_data(self) -> dict[str, Any]:
        """The caller's keys only, as persisted on ``Chat.context``."""
        return copy.deepcopy({k: v for k, v in self._data.items() if k not in self.RESERVED_KEYS})
