from .attachment import AbstractAttachment, Attachment
from .chat import AbstractChat, Chat
from .llm_model import AbstractLLMModel, LLMModel
from .message import AbstractMessage, Message
from .tool_call import AbstractToolCall, ToolCall
from .usage import AbstractUsage, Usage

__all__ = [
    "AbstractAttachment",
    "AbstractChat",
    "AbstractLLMModel",
    "AbstractMessage",
    "AbstractToolCall",
    "AbstractUsage",
    "Attachment",
    "Chat",
    "LLMModel",
    "Message",
    "ToolCall",
    "Usage",
]
