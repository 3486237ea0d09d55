"""``Run.reserved_cost``: the USD a run's admission reserved (its first request's expected
cost), counted by the spending limits while the run is unfinished. Runs stored before
reserved nothing."""

from decimal import Decimal

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0015_run_enqueue_v2"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="reserved_cost",
            field=models.DecimalField(
                decimal_places=10,
                default=Decimal("0"),
                editable=False,
                help_text="USD the run's admission reserved: its first request's expected "
                "cost, counted by the spending limits while the run is unfinished.",
                max_digits=16,
            ),
        ),
    ]
