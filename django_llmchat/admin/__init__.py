"""Admin: chats with their whole transcript, runs, usage rows and the dashboard, the model
registry and the spending limits, each in its own module; importing this package
registers them all."""

from .chats import LEDGER_NOTE, ChatAdmin, ChatForm
from .lifecycle import (
    erase_llmchat_data,
    erase_users_view,
    export_llmchat_data,
    export_users_response,
)
from .registry import LimitAdmin, LLMModelAdmin, LLMModelForm
from .transcripts import TRANSCRIPT_PAGE_SIZE, build_transcript, transcript_page
from .usage import RunAdmin, UsageAdmin, UsageDashboardAdmin

__all__ = [
    "LEDGER_NOTE",
    "TRANSCRIPT_PAGE_SIZE",
    "ChatAdmin",
    "ChatForm",
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
