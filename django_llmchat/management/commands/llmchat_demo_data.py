"""``manage.py llmchat_demo_data``: a month of sample usage, so the dashboard has data.

Everything it writes is labelled as sample data: three users ``sample-ada``,
``sample-ben`` and ``sample-chloe`` (who cannot log in), chats titled ``Sample: ...``
and usage rows with ``operation="sample"``. Running it again replaces the earlier sample
data; ``--clear`` removes it and writes nothing. Costs are priced like real attempts
(genai-prices, the bundled demo prices), tokens and times are made up.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from django_llmchat.models import Chat, Usage

SAMPLE_OPERATION = "sample"
SAMPLE_USERS = ("sample-ada", "sample-ben", "sample-chloe")
TITLE_PREFIX = "Sample: "

# (provider, model, weight, typical input tokens, typical output tokens, cache share)
MODELS = (
    ("openai", "gpt-4.1-mini", 5, 2400, 420, 0.5),
    ("anthropic", "claude-haiku-4-5", 3, 3100, 380, 0.6),
    ("gemini", "gemini-2.5-flash", 2, 1800, 520, 0.3),
    ("openai", "gpt-5", 1, 5200, 1400, 0.4),
    ("demo", "demo-model", 2, 300, 80, 0.0),
)
TOPICS = (
    "Trip to Lisbon", "Quarterly report", "SQL tuning", "Birthday ideas", "Refactoring plan",
    "Recipe swap", "Cover letter", "Physics homework", "Bug triage", "Garden layout",
    "Release notes", "Spanish practice",
)  # fmt: skip


class Command(BaseCommand):
    help = (
        "Write a month of sample usage (labelled: users sample-*, chats 'Sample: ...', "
        "usage operation 'sample') for the usage dashboard; replaces earlier sample data."
    )

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=30, help="days of usage (default 30)")
        parser.add_argument(
            "--per-day", type=int, default=40, help="attempts per day on average (default 40)"
        )
        parser.add_argument("--seed", type=int, default=14, help="random seed (default 14)")
        parser.add_argument(
            "--clear", action="store_true", help="remove the sample data and write nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days, per_day = options["days"], options["per_day"]
        if not 1 <= days <= 366:
            raise CommandError("--days must be between 1 and 366.")
        if not 1 <= per_day <= 10_000:
            raise CommandError("--per-day must be between 1 and 10000.")
        with transaction.atomic():
            removed = self._clear()
            if options["clear"]:
                self.stdout.write(f"Removed {removed} sample usage rows.")
                return
            count = self._write(days, per_day, random.Random(options["seed"]))
        self.stdout.write(
            f"Wrote {count} sample usage rows over {days} days (operation 'sample', chats "
            f"'{TITLE_PREFIX}...', users {', '.join(SAMPLE_USERS)}). See the usage dashboard "
            "in the admin; `manage.py llmchat_demo_data --clear` removes them."
        )

    @staticmethod
    def _clear() -> int:
        user_model = get_user_model()
        users = user_model._default_manager.filter(
            **{f"{user_model.USERNAME_FIELD}__in": SAMPLE_USERS}
        )
        removed = Usage.objects.filter(operation=SAMPLE_OPERATION).count()
        Usage.objects.filter(operation=SAMPLE_OPERATION).delete()
        Chat.objects.filter(user__in=users, title__startswith=TITLE_PREFIX).delete()
        return removed

    @staticmethod
    def _users() -> list[Any]:
        user_model = get_user_model()
        users = []
        for name in SAMPLE_USERS:
            user = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: name}).first()
            if user is None:
                user = user_model(**{user_model.USERNAME_FIELD: name})
                user.set_unusable_password()
                user.save()
            users.append(user)
        return users

    def _write(self, days: int, per_day: int, rnd: random.Random) -> int:
        users = self._users()
        chats = []
        for i, topic in enumerate(TOPICS):
            provider, model_id, *_ = MODELS[i % len(MODELS)]
            chat = Chat.objects.create(
                user=users[i % len(users)],
                title=f"{TITLE_PREFIX}{topic}",
                provider=provider,
                model_id=model_id,
            )
            chat.add_message(role="user", content=f"(sample data) {topic}?")
            chats.append(chat)
        weights = [m[2] for m in MODELS]
        today = timezone.localtime().replace(minute=0, second=0, microsecond=0)
        total = 0
        for day in range(days - 1, -1, -1):
            # weekdays busier than weekends, a slow rise over the month
            when = today - timedelta(days=day)
            busy = (0.5 if when.weekday() >= 5 else 1.0) * (0.7 + 0.6 * (days - day) / days)
            rows = []
            for _ in range(max(1, int(rnd.gauss(per_day * busy, per_day * 0.15)))):
                provider, model_id, _, inp, out, cache = rnd.choices(MODELS, weights)[0]
                chat = rnd.choice(chats)
                status = rnd.choices((Usage.SUCCEEDED, Usage.FAILED, Usage.CANCELLED), (92, 6, 2))[
                    0
                ]
                prompt = max(10, int(rnd.lognormvariate(0, 0.6) * inp))
                cached = int(prompt * cache * rnd.random())
                row = Usage(
                    chat=chat,
                    user_id=chat.user_id,  # the ledger's own column: the dashboard's "By user"
                    operation=SAMPLE_OPERATION,
                    provider=provider,
                    model_id=model_id,
                    status=status,
                    input_tokens=prompt - cached,
                    output_tokens=(
                        0
                        if status == Usage.FAILED
                        else max(1, int(rnd.lognormvariate(0, 0.5) * out))
                    ),
                    cache_read_tokens=cached,
                    cache_write_tokens=0,
                    duration_ms=int(rnd.uniform(400, 9000)),
                    error="(sample data) rate limited" if status == Usage.FAILED else "",
                )
                row.freeze_cost()
                rows.append(row)
            created = Usage.objects.bulk_create(rows, batch_size=500)
            # auto_now_add stamped them now: move them back to their day, spread over it
            hours = sorted(rnd.randrange(8, 22) for _ in range(4))
            chunk = max(1, len(created) // len(hours))
            for i, hour in enumerate(hours):
                part = created[i * chunk : None if i == len(hours) - 1 else (i + 1) * chunk]
                if part:
                    at = when.replace(hour=min(hour, today.hour) if day == 0 else hour)
                    Usage.objects.filter(pk__in=[r.pk for r in part]).update(created_at=at)
            total += len(created)
        return total
