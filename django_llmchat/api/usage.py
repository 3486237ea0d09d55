"""Token and cost totals of a chat, overall and per model."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, Sum

from ..models import Chat, Message, Usage
from ..values import COST_FIELDS, TOKEN_FIELDS, Cost, Tokens
from .fields import cost_dict, tokens_dict

__all__ = ["chat_usage"]


def chat_usage(chat: Chat) -> dict[str, Any]:
    """Totals over the chat's provider attempts (plus hand-built messages that carry their
    own tokens or cost), overall (every branch) and per model, and over the active path's
    messages (``path``: what the branch shown cost)."""
    sums = {name: Sum(name) for name in TOKEN_FIELDS}
    costs = {f"c_{part}": Sum(f"{part}_cost") for part in COST_FIELDS}
    rows = (
        Usage.objects.filter(chat=chat)
        .order_by()
        .values("provider", "model_id")
        .annotate(
            attempts=Count("pk"), estimated=Count("pk", filter=Q(estimated=True)), **sums, **costs
        )
        .order_by("provider", "model_id")
    )
    manual = (
        Message.objects.filter(chat=chat, usages__isnull=True)
        .filter(
            Q(supplied_cost__isnull=False)
            | Q(input_tokens__isnull=False)
            | Q(output_tokens__isnull=False)
            | Q(cache_read_tokens__isnull=False)
            | Q(cache_write_tokens__isnull=False)
            | Q(thinking_tokens__isnull=False)
        )
        .order_by()
        .values("provider", "model_id")
        .annotate(**sums, c_total=Sum("supplied_cost"))
    )
    by_model: dict[tuple[str, str], dict[str, Any]] = {}
    for row in list(rows) + list(manual):
        key = (row["provider"], row["model_id"])
        entry = by_model.setdefault(
            key, {"attempts": 0, "estimated": 0, "tokens": Tokens(), "cost": Cost()}
        )
        entry["attempts"] += row.get("attempts", 0)
        entry["estimated"] += row.get("estimated", 0)
        entry["tokens"] += Tokens(**{n: row[n] for n in TOKEN_FIELDS})
        entry["cost"] += Cost(**{p: row.get(f"c_{p}") for p in COST_FIELDS})
    statuses = dict(
        Usage.objects.filter(chat=chat)
        .order_by()
        .values_list("status")
        .annotate(n=Count("pk"))
        .values_list("status", "n")
    )
    total_tokens, total_cost, estimated = Tokens(), Cost(), 0
    out_models = []
    for (provider, model_id), entry in sorted(by_model.items()):
        total_tokens += entry["tokens"]
        total_cost += entry["cost"]
        estimated += entry["estimated"]
        out_models.append(
            {
                "provider": provider,
                "model_id": model_id,
                "attempts": entry["attempts"],
                "estimated": entry["estimated"],
                "tokens": tokens_dict(entry["tokens"]),
                "cost": cost_dict(entry["cost"]),
            }
        )
    return {
        "chat": chat.pk,
        "tokens": tokens_dict(total_tokens),
        "cost": cost_dict(total_cost),
        "estimated": estimated,
        "attempts": statuses,
        "by_model": out_models,
        "path": {"tokens": tokens_dict(chat.path_tokens()), "cost": cost_dict(chat.path_cost())},
    }
