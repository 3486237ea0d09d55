"""The API's views, each in the module of its concern, importable from here too:

- :mod:`.chats`: ``ChatViewSet`` (chats, cancel, usage, live events), ``RunViewSet``
- :mod:`.messages`: ``MessageListCreateView``, ``ToolCallDecisionView``
- :mod:`.ui_views`: ``UIChatView``, ``UIChatStreamView``, ``UIChatMessagesView``,
  ``UIChatStopView`` (the AI SDK's transport)
- :mod:`.registry`: ``LLMModelViewSet``; :mod:`.tokens`: ``TokenView``
- :mod:`.schema_views`: ``SchemaView``, ``SchemaSwaggerView``, ``SchemaRedocView``

What they share (``LLMChatView``) is in :mod:`.base`, the parsers in :mod:`.parsers`."""

from __future__ import annotations

from .base import LLMChatView
from .chats import ChatViewSet, RunViewSet
from .messages import MessageListCreateView, ToolCallDecisionView
from .parsers import StrictJSONParser, StrictMultiPartParser
from .registry import LLMModelViewSet
from .schema_views import SchemaRedocView, SchemaSwaggerView, SchemaView
from .tokens import TokenView
from .ui.views import UIChatMessagesView, UIChatStopView, UIChatStreamView, UIChatView

__all__ = [
    "ChatViewSet",
    "LLMChatView",
    "LLMModelViewSet",
    "MessageListCreateView",
    "RunViewSet",
    "SchemaRedocView",
    "SchemaSwaggerView",
    "SchemaView",
    "StrictJSONParser",
    "StrictMultiPartParser",
    "TokenView",
    "ToolCallDecisionView",
    "UIChatMessagesView",
    "UIChatStopView",
    "UIChatStreamView",
    "UIChatView",
]
