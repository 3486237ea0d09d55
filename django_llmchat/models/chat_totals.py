"""What a chat cost: its tokens and USD over every provider attempt (``tokens``,
``cost()``), over its active path (``path_tokens()``, ``path_cost()``), and the same
annotated on a list of chats (``Chat.objects.with_totals()``)."""

from __future__ import annotations

from django.db import models
from django.db.models import Count, ExpressionWrapper, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from ..values import TOKEN_FIELDS, Cost, Tokens
from .message import Message
from .run import Run
from .usage import Usage


def _either_or_sum(a, b, field):
    """``a + b``; either alone when the other is NULL; NULL when both are."""
    total = ExpressionWrapper(a + b, output_field=field)
    return Coalesce(total, a, b, output_field=field)


class TotalsQuerySet(models.QuerySet):
    def with_totals(self):
        """Annotate ``message_count``, ``total_tokens`` and ``total_cost`` with subqueries
        (no row multiplication, one query for any number of chats). The totals are
        :attr:`Chat.tokens` and :meth:`Chat.cost`: every provider attempt, plus the counts
        and supplied costs of hand-built messages (no usage rows); ``None`` when nothing
        is known."""
        count = (
            Message.objects.filter(chat=OuterRef("pk"))
            .order_by()
            .values("chat")
            .annotate(n=Count("pk"))
            .values("n")
        )
        token_sum = Sum(
            Coalesce("input_tokens", Value(0))
            + Coalesce("output_tokens", Value(0))
            + Coalesce("cache_read_tokens", Value(0))
            + Coalesce("cache_write_tokens", Value(0))
        )
        usage = Usage.objects.filter(chat=OuterRef("pk")).order_by().values("chat")
        tokens = usage.annotate(t=token_sum).values("t")
        cost = usage.annotate(c=Sum("total_cost")).values("c")
        # hand-built messages: their own token columns (only the ones with a count) and
        # their supplied cost, as Chat.tokens and Chat.cost() count them
        manual = (
            Message.objects.filter(chat=OuterRef("pk"), usages__isnull=True)
            .order_by()
            .values("chat")
        )
        counted = Q()
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            counted |= Q(**{f"{name}__isnull": False})
        manual_tokens = manual.filter(counted).annotate(t=token_sum).values("t")
        supplied = (
            manual.filter(supplied_cost__isnull=False).annotate(c=Sum("supplied_cost")).values("c")
        )
        last = Run.objects.filter(chat=OuterRef("pk")).order_by("-id")
        return self.annotate(
            message_count=Coalesce(Subquery(count), Value(0)),
            total_tokens=_either_or_sum(
                Subquery(tokens), Subquery(manual_tokens), models.BigIntegerField()
            ),
            total_cost=_either_or_sum(Subquery(cost), Subquery(supplied), Usage.total_cost.field),
            **{
                f"_last_run_{name}": Subquery(last.values(name)[:1])
                for name in ("id", "status", "error", "error_type")
            },
        )


class ChatTotals:
    """``tokens``, ``cost()``, ``path_tokens()`` and ``path_cost()``: a mixin of
    :class:`~django_llmchat.models.AbstractChat`."""

    def path_tokens(self) -> Tokens:
        """Tokens of the active path's messages (their provider attempts, plus hand-built
        messages' own counts): what this branch cost to produce. ``tokens`` is every
        attempt of every branch."""
        on_path = Message.objects.filter(chat=self, on_path=True)
        usage = Usage.objects.filter(message__in=on_path).tokens()
        manual = on_path.filter(usages__isnull=True).aggregate(**{n: Sum(n) for n in TOKEN_FIELDS})
        return usage + Tokens(**manual)

    def path_cost(self) -> Cost:
        """USD of the active path's messages (their attempts, plus supplied costs of
        hand-built ones). ``cost()`` is everything paid, every branch and failed attempt."""
        on_path = Message.objects.filter(chat=self, on_path=True)
        total = Usage.objects.filter(message__in=on_path).cost()
        supplied = on_path.filter(usages__isnull=True, supplied_cost__isnull=False).aggregate(
            s=Sum("supplied_cost")
        )["s"]
        if supplied is not None:
            total = total + Cost(total=supplied)
        return total

    @property
    def tokens(self) -> Tokens:
        """Tokens over every provider attempt, plus hand-built messages without usage rows."""
        usage = self.usages.all().tokens()
        manual = Message.objects.filter(chat=self, usages__isnull=True).aggregate(
            **{n: Sum(n) for n in TOKEN_FIELDS}
        )
        return usage + Tokens(**manual)

    def cost(self) -> Cost:
        """USD over every provider attempt, plus costs supplied on hand-built messages."""
        total = self.usages.all().cost()
        supplied = Message.objects.filter(
            chat=self, usages__isnull=True, supplied_cost__isnull=False
        ).aggregate(s=Sum("supplied_cost"))["s"]
        if supplied is not None:
            total = total + Cost(total=supplied)
        return total
