"""A chat's transcript as the admin shows it: tool calls beside their results, paged."""

from __future__ import annotations

from typing import Any

from django.core.paginator import InvalidPage, Paginator
from django.db.models import Prefetch

from ..models import Chat, Feedback, LLMModel, Run
from ..models.branches import siblings
from ..values import Cost, Tokens
from .base import _money

TRANSCRIPT_PAGE_SIZE = 50
"""Messages per page of a chat's transcript in the admin (the latest page comes first)."""


def build_transcript(chat: Chat) -> dict[str, Any]:
    """The chat's active path arranged for display: each tool call with its result
    beneath, where the chat branches the message's place among its alternatives
    (``entry["branch"]``: ``index``, ``count``, ``previous``, ``next``), and a message's
    usage rows when it took more than one attempt (``entry["attempts"]``: retries, model
    fallbacks).

    Runs a constant number of queries whatever the transcript length."""
    feedback = Feedback.objects.select_related("user").order_by("id")
    messages = list(chat.transcript().prefetch_related(Prefetch("feedback", queryset=feedback)))
    alternatives = siblings(messages)
    model_ids = {m.model_id for m in messages if m.model_id}
    registry = {}
    if model_ids:
        for row in LLMModel.objects.filter(model_id__in=model_ids):
            registry.setdefault(row.model_id, row)
    answered: set[int] = set()
    for m in messages:
        if m.model_id:
            m.model_info = registry.get(m.model_id)
        for call in m.tool_calls.all():
            result = call.get_result()
            if result is not None:
                answered.add(result.pk)
    # runs that did not end with a reply are shown where they stopped: after the last
    # message they stored, else after their prompt
    runs = [r for r in Run.objects.filter(chat=chat).order_by("id") if r.status != Run.SUCCEEDED]
    marks: dict[int, list[Run]] = {}
    leading: list[Run] = []
    index = {m.pk: i for i, m in enumerate(messages)}
    last_of_run: dict[int, int] = {}
    for i, m in enumerate(messages):
        if m.run_id is not None:
            last_of_run[m.run_id] = i
    for run in runs:
        stored = [i for i in (last_of_run.get(run.pk), index.get(run.prompt_id)) if i is not None]
        if stored:
            marks.setdefault(messages[max(stored)].pk, []).append(run)
        else:
            leading.append(run)
    entries: list[dict[str, Any]] = [{"run": run} for run in leading]
    total_tokens = Tokens()
    total_cost = Cost()
    any_estimated = False
    for m in messages:
        if m.pk in answered:
            entries.extend({"run": run} for run in marks.get(m.pk, ()))
            continue  # shown beneath its tool call
        calls = []
        for call in m.tool_calls.all():
            result = call.get_result()
            calls.append({"call": call, "result": result})
        tokens = m.tokens
        cost = m.cost() if (m.role == "assistant" or not tokens.is_empty) else Cost()
        total_tokens = total_tokens + tokens
        total_cost = total_cost + cost
        estimated = m.is_estimated  # a stopped reply's counts are ours
        any_estimated = any_estimated or estimated
        cost_display = _money(cost.total) if cost.total is not None else ""
        if estimated and cost_display:
            cost_display = f"~{cost_display} (estimated)"
        entries.append(
            {
                "message": m,
                "tool_calls": calls,
                "tokens": tokens,
                "estimated": estimated,
                "cost": cost,
                "cost_display": cost_display,
                "attachments": list(m.attachments.all()),
                "feedback": list(m.feedback.all()),
                "branch": _branch(m.pk, alternatives[m.pk]),
                "attempts": _attempts(m),
            }
        )
        entries.extend({"run": run} for run in marks.get(m.pk, ()))
    return {
        "entries": entries,
        "last_message_id": messages[-1].pk if messages else None,
        "message_count": len(messages),
        "off_path_count": chat.messages.filter(on_path=False).count(),
        "total_tokens": total_tokens,
        "total_cost": total_cost,
        "total_cost_display": (
            f"~{_money(total_cost.total)} (estimated)"
            if any_estimated and total_cost.total is not None
            else _money(total_cost.total)
        ),
    }


def _attempts(m: Any) -> list[Any]:
    """The provider attempts of a message (its usage rows, loaded with it) when they are
    more than the one that answered: retries, and models it fell back from
    (``LLMCHAT["FALLBACKS"]``); empty otherwise."""
    rows = sorted(m.usages.all(), key=lambda row: row.pk)
    if len(rows) > 1 or any((r.provider, r.model_id) != (m.provider, m.model_id) for r in rows):
        return rows
    return []


def _branch(pk: int, ids: list[int]) -> dict[str, Any] | None:
    """A message's place among its alternatives, with its neighbours' ids (``None`` when
    it has none)."""
    if len(ids) < 2:
        return None
    i = ids.index(pk)
    return {
        "index": i + 1,
        "count": len(ids),
        "previous": ids[i - 1] if i > 0 else None,
        "next": ids[i + 1] if i + 1 < len(ids) else None,
    }


def transcript_page(
    transcript: dict[str, Any], number: str | int | None, *, focus: Any = None
) -> dict[str, Any]:
    """One page of :func:`build_transcript`'s entries, :data:`TRANSCRIPT_PAGE_SIZE` a page;
    no ``number`` (or a bad one) means the page holding message ``focus`` when given, else
    the LAST page, where the latest messages are."""
    paginator = Paginator(transcript["entries"], TRANSCRIPT_PAGE_SIZE, orphans=5)
    if not number and focus is not None:
        number = _page_of(transcript["entries"], focus, paginator)
    try:
        page = paginator.page(int(number or paginator.num_pages))
    except (ValueError, InvalidPage):
        page = paginator.page(paginator.num_pages)
    return {
        **transcript,
        "entries": page.object_list,
        "page": page,
        "page_range": list(paginator.get_elided_page_range(page.number, on_each_side=2)),
    }


def _page_of(entries: list[dict[str, Any]], focus: Any, paginator: Paginator) -> int | None:
    for i, entry in enumerate(entries):
        message = entry.get("message")
        if message is not None and str(message.pk) == str(focus):
            return min(i // paginator.per_page + 1, paginator.num_pages)
    return None
