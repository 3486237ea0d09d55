from .attachment import AbstractAttachment, Attachment
from .chat import AbstractChat, Chat
from .idempotency import AbstractIdempotencyKey, IdempotencyKey
from .limit import AbstractLimit, Limit
from .llm_model import AbstractLLMModel, LLMModel
from .message import AbstractMessage, Message
from .run import AbstractRun, Run
from .tool_call import AbstractToolCall, ToolCall
from .usage import AbstractUsage, Usage, UsageDashboard

__all__ = [
    "AbstractAttachment",
    "AbstractChat",
    "AbstractIdempotencyKey",
    "AbstractLimit",
    "AbstractLLMModel",
    "AbstractMessage",
    "AbstractRun",
    "AbstractToolCall",
    "AbstractUsage",
    "Attachment",
    "Chat",
    "IdempotencyKey",
    "LLMModel",
    "Limit",
    "Message",
    "Run",
    "ToolCall",
    "Usage",
    "UsageDashboard",
]
