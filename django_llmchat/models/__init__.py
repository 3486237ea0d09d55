from .attachment import AbstractAttachment, Attachment
from .chat import AbstractChat, Chat
from .feedback import AbstractFeedback, Feedback
from .idempotency import AbstractIdempotencyKey, IdempotencyKey
from .limit import AbstractLimit, Limit
from .llm_model import AbstractLLMModel, LLMModel
from .message import AbstractMessage, Message
from .run import AbstractRun, Run
from .share import AbstractChatShare, ChatShare
from .tag import ChatTag
from .tool_call import AbstractToolCall, ToolCall
from .usage import AbstractUsage, Usage, UsageDashboard

__all__ = [
    "AbstractAttachment",
    "AbstractChat",
    "AbstractChatShare",
    "AbstractFeedback",
    "AbstractIdempotencyKey",
    "AbstractLimit",
    "AbstractLLMModel",
    "AbstractMessage",
    "AbstractRun",
    "AbstractToolCall",
    "AbstractUsage",
    "Attachment",
    "Chat",
    "ChatShare",
    "ChatTag",
    "Feedback",
    "IdempotencyKey",
    "LLMModel",
    "Limit",
    "Message",
    "Run",
    "ToolCall",
    "Usage",
    "UsageDashboard",
]
