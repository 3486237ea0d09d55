"""``manage.py llmchat_recover``: resume the runs nobody works on although they should be.

A run whose worker died (its lease ran out) is resumed from its last stored step; a queued
run whose task was lost is sent again. Run it from cron on a deployment without Celery
beat (or with a broker that does not redeliver), or by hand after an outage. The
periodic task ``django_llmchat.tasks.recover_runs`` does the same from Celery beat.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from ...models.idempotency import purge_expired_keys
from ...runs import recover


class Command(BaseCommand):
    help = (
        "Resume runs whose worker died (lease ran out) and send again queued runs whose "
        "task was lost (and delete expired idempotency keys). --inline runs them in this "
        "process instead of sending tasks."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--inline",
            action="store_true",
            help="Answer the runs here (no worker needed) instead of sending their tasks.",
        )

    def handle(self, *args, inline: bool = False, **options):
        dispatch = None
        if inline:
            from ...tasks import run_in_process

            def dispatch(chat_id: int, run_id: int) -> None:
                run_in_process(chat_id, run_id)

        found = recover(dispatch)
        purged = purge_expired_keys()
        if purged:
            plural = "s" if purged != 1 else ""
            self.stdout.write(f"{purged} expired idempotency key{plural} deleted.")
        if not found:
            self.stdout.write("No run to recover.")
            return
        how = "answered here" if inline else "sent to the workers"
        self.stdout.write(
            f"{len(found)} run{'s' if len(found) != 1 else ''} {how}: "
            + ", ".join(f"run {r.pk} of chat {r.chat_id} ({r.status})" for r in found)
        )
