"""The runs' rows (``models/run.py``): unfinished and finished, the statuses a run can
have, and its tokens, cost and ``estimated`` read from its usage rows, annotated in one
query by ``with_totals()`` or read on demand (none before a process took it on)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.models import Chat, Run, Usage
from django_llmchat.values import Cost, Tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat():
    return Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")


def _usage(run, *, estimated=False, **values):
    return Usage.objects.create(
        chat=run.chat,
        run=run,
        provider="openai",
        model_id="gpt-4.1-mini",
        estimated=estimated,
        **values,
    )


def test_the_statuses_split_into_unfinished_and_finished():
    assert Run.STATUSES == Run.UNFINISHED + Run.FINISHED
    assert not set(Run.UNFINISHED) & set(Run.FINISHED)
    assert Run.UNFINISHED == ("queued", "running", "awaiting_approval")
    assert Run._meta.get_field("status").default == Run.QUEUED


def test_unfinished_and_finished_querysets(chat):
    runs = {status: Run.objects.create(chat=chat, status=status) for status in Run.STATUSES}
    unfinished = set(Run.objects.unfinished().values_list("status", flat=True))
    finished = set(Run.objects.finished().values_list("status", flat=True))
    assert unfinished == set(Run.UNFINISHED) and finished == set(Run.FINISHED)
    for status, run in runs.items():
        assert run.is_unfinished is (status in Run.UNFINISHED)
        assert run.is_working is (status == Run.RUNNING)
        assert run.is_queued is (status == Run.QUEUED)
        assert run.is_awaiting_approval is (status == Run.AWAITING_APPROVAL)
        assert run.is_finished is (status in Run.FINISHED)
        assert str(run) == f"Run {run.pk} ({status})"


def test_a_run_never_taken_on_has_no_tokens_nor_cost_and_asks_nothing(chat):
    run = Run.objects.create(chat=chat)  # attempt 0: no provider was called
    _usage(run, input_tokens=5)  # not counted: no attempt was made
    with CaptureQueriesContext(connection) as queries:
        assert run.tokens == Tokens() and run.cost() == Cost() and run.estimated is False
        assert Run(chat=chat).tokens == Tokens()
    assert queries.captured_queries == []


def test_tokens_cost_and_estimated_sum_the_usage_rows(chat):
    run = Run.objects.create(chat=chat, attempt=1, status=Run.SUCCEEDED)
    other = Run.objects.create(chat=chat, attempt=1)
    _usage(
        run,
        input_tokens=10,
        output_tokens=3,
        input_cost=Decimal("0.1"),
        output_cost=Decimal("0.2"),
        total_cost=Decimal("0.3"),
    )
    _usage(
        run,
        input_tokens=4,
        output_tokens=1,
        estimated=True,
        input_cost=Decimal("0.01"),
        output_cost=Decimal("0.02"),
        total_cost=Decimal("0.03"),
    )
    _usage(other, input_tokens=1000, total_cost=Decimal("9"))
    run.refresh_from_db()
    assert run.tokens.input_tokens == 14 and run.tokens.output_tokens == 4
    assert run.cost().total == Decimal("0.33") and run.cost().input == Decimal("0.11")
    assert run.estimated is True
    assert Run.objects.get(pk=other.pk).estimated is False


def test_with_totals_annotates_the_same_totals_in_one_query(chat):
    run = Run.objects.create(chat=chat, attempt=1)
    _usage(
        run,
        input_tokens=7,
        output_tokens=2,
        total_cost=Decimal("0.5"),
        input_cost=Decimal("0.4"),
        output_cost=Decimal("0.1"),
    )
    _usage(run, input_tokens=1, estimated=True, total_cost=Decimal("0.25"))
    idle = Run.objects.create(chat=chat, attempt=1)
    plain = Run.objects.get(pk=run.pk)
    tokens, cost = plain.tokens, plain.cost()
    with CaptureQueriesContext(connection) as queries:
        rows = {r.pk: r for r in Run.objects.with_totals().filter(chat=chat)}
        annotated = rows[run.pk]
        assert annotated.tokens == tokens
        assert annotated.cost() == cost
        assert annotated.estimated is True and rows[idle.pk].estimated is False
        assert rows[idle.pk].tokens == Tokens() and rows[idle.pk].cost().total is None
    assert len(queries.captured_queries) == 1
    assert annotated.tokens.input_tokens == 8 and annotated.cost().total == Decimal("0.75")
