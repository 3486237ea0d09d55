"""A user's limit row (``models/limit.py``): ``values()`` holds the limits it sets (an
empty field keeps the setting's), ``soft`` among them when set."""

from __future__ import annotations

from decimal import Decimal

import pytest

from django_llmchat.models import Limit
from django_llmchat.models.limit import LIMIT_FIELDS

pytestmark = pytest.mark.django_db


def test_values_hold_the_limits_set(django_user_model):
    user = django_user_model.objects.create_user("lim")
    row = Limit.objects.create(user=user)
    assert row.values() == {} and str(row) == "Limits of lim"
    row.usd_per_day, row.runs_per_hour, row.concurrent_runs = Decimal("2"), 0, 3
    assert row.values() == {"usd_per_day": Decimal("2"), "runs_per_hour": 0, "concurrent_runs": 3}
    row.soft = Decimal("0.8")
    row.save()
    loaded = Limit.objects.get(user=user)
    assert loaded.values()["soft"] == Decimal("0.8") and "usd_per_month" not in loaded.values()
    assert user.llmchat_limit == loaded


def test_every_limit_field_is_a_column():
    names = {f.name for f in Limit._meta.get_fields()}
    assert set(LIMIT_FIELDS) <= names
    for name in LIMIT_FIELDS:
        assert Limit._meta.get_field(name).null  # empty: the setting's value
