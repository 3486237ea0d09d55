"""``manage.py llmchat_retention [--dry-run]``: delete or anonymise the chats past
``LLMCHAT["RETENTION"]`` (their usage rows stay), as the periodic task
``django_llmchat.tasks.apply_retention`` does; ``--dry-run`` only lists them."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from ...chats.retention import apply_retention
from ...conf import settings


class Command(BaseCommand):
    help = (
        "Delete or anonymise the chats older than LLMCHAT['RETENTION'] (per user: "
        "RETENTION_FOR, per chat: retention_days); the usage ledger stays. --dry-run "
        "lists them and changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="List what would be done; change nothing."
        )

    def handle(self, *args, dry_run: bool = False, **options):
        if settings.RETENTION is None:
            self.stdout.write("Retention is off (LLMCHAT['RETENTION'] is None): nothing to do.")
            return
        found, done = apply_retention(dry_run=dry_run)
        verb = {"delete": "delete", "anonymise": "anonymise"}
        for item in found:
            when = item.updated_at.isoformat(timespec="seconds")
            self.stdout.write(
                f"{'would ' if dry_run else ''}{verb[item.action]} chat {item.chat_id} "
                f"(user {item.user_id if item.user_id is not None else '-'}, last change "
                f"{when}, kept {item.days} days): {item.title or '(no title)'}"
            )
        if dry_run:
            self.stdout.write(f"{len(found)} chat{'s' if len(found) != 1 else ''} due; dry run.")
        else:
            self.stdout.write(
                f"{done['delete']} chat{'s' if done['delete'] != 1 else ''} deleted, "
                f"{done['anonymise']} anonymised; their usage rows stay."
            )
