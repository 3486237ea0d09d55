"""Admin: chats with their whole transcript (and a page importing them), feedback on
replies, runs, usage rows and the dashboard, share links, the model registry and the
spending limits, each in its own module; importing this package registers them all."""

from .chats import LEDGER_NOTE, ChatAdmin, ChatForm
from .feedback import FeedbackAdmin, FeedbackFilter
from .lifecycle import (
    erase_llmchat_data,
    erase_users_view,
    export_llmchat_data,
    export_users_response,
)
from .registry import LimitAdmin, LLMModelAdmin, LLMModelForm
from .shares import ChatShareAdmin
from .transcripts import TRANSCRIPT_PAGE_SIZE, build_transcript, transcript_page
from .usage import RunAdmin, UsageAdmin, UsageDashboardAdmin

__all__ = [
    "LEDGER_NOTE",
    "TRANSCRIPT_PAGE_SIZE",
    "ChatAdmin",
    "ChatForm",
    "ChatShareAdmin",
    "FeedbackAdmin",
    "FeedbackFilter",
    "LLMModelAdmin",
    "LLMModelForm",
    "LimitAdmin",
    "RunAdmin",
    "UsageAdmin",
    "UsageDashboardAdmin",
    "build_transcript",
    "erase_llmchat_data",
    "erase_users_view",
    "export_llmchat_data",
    "export_users_response",
    "transcript_page",
]
