"""The summary request of a compaction: one attempt on the summary model, on the usage
ledger like every other (:class:`~django_llmchat.loop.attempts.ProviderAttempts`)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ..errors import ProviderError
from ..models import Usage
from ..providers import get_provider
from .attempts_billing import Received
from .history import check_summary_response, summary_request
from .steps import record_failed_attempts, save_summary, usage_row

if TYPE_CHECKING:
    from .attempts import ProviderAttempts

__all__ = ["summarize"]

logger = logging.getLogger("django_llmchat.loop.runner")


def summarize(attempts: ProviderAttempts, covered, until_id, previous, budget):
    """Write and store a summary of ``covered`` (the messages up to ``until_id``,
    after the ``previous`` summary): one request to the summary model, its own usage
    row. Returns the summary row, or ``None`` when the summary model failed (the run
    goes on with a window)."""
    chat, execution, options = (
        attempts.runner.chat,
        attempts.runner.execution,
        attempts.runner.history.options,
    )
    provider_name = options.summary_provider or chat.provider
    model_id = options.summary_model or chat.model_id
    started = time.monotonic()
    pending = None
    try:
        provider = (
            attempts.runner.provider
            if provider_name == chat.provider
            else get_provider(provider_name)
        )
        request = summary_request(options, model_id, covered, previous, budget)
        request.chat = chat  # what LLMCHAT["REDACT"] is told of
        pending = attempts.open_attempt(request, provider_name, model_id, operation="summary")
        response = provider.complete(request)
        content = check_summary_response(provider_name, response.content)
    except Exception as exc:
        ours = not isinstance(exc, ProviderError)  # a fault of ours fails the run
        if pending is not None or not ours:  # an attempt was made: it is on the ledger
            failed = usage_row(
                chat,
                provider=provider_name,
                model_id=model_id,
                status=Usage.FAILED,
                started=started,
                error=f"{type(exc).__name__}: {exc}" if ours else str(exc),
                run_id=execution.pk,
            )
            failed.operation = "summary"
            record_failed_attempts([attempts.close_attempt(pending, failed)])
        if ours:
            raise
        logger.warning("chat %s: the summary failed, a window is sent instead: %s", chat.pk, exc)
        return None
    tokens, estimated = attempts.billed(pending, Received(), response)
    usage = usage_row(
        chat,
        provider=provider_name,
        model_id=response.model_id or model_id,
        status=Usage.SUCCEEDED,
        tokens=tokens,
        started=started,
        first_token=time.monotonic(),
        run_id=execution.pk,
    )
    usage.operation, usage.estimated = "summary", estimated
    attempts.close_attempt(pending, usage, response)
    return save_summary(
        chat,
        content=content,
        until_id=until_id,
        provider=provider_name,
        model_id=response.model_id or model_id,
        usage=usage,
        execution=execution,
    )
