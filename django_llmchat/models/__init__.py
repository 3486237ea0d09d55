from .attachment import AbstractAttachment, Attachment
from .chat import AbstractChat, Chat
from .llm_model import AbstractLLMModel, LLMModel
from .message import AbstractMessage, Message
from .run import AbstractRun, Run
from .tool_call import AbstractToolCall, ToolCall
from .usage import AbstractUsage, Usage, UsageDashboard

__all__ = [
    "AbstractAttachment",
    "AbstractChat",
    "AbstractLLMModel",
    "AbstractMessage",
    "AbstractRun",
    "AbstractToolCall",
    "AbstractUsage",
    "Attachment",
    "Chat",
    "LLMModel",
    "Message",
    "Run",
    "ToolCall",
    "Usage",
    "UsageDashboard",
]
