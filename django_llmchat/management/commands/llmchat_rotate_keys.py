"""``manage.py llmchat_rotate_keys``: rewrite the encrypted columns with the first key.

After a new key was put first in ``LLMCHAT["ENCRYPTION_KEYS"]`` (the old ones kept after
it), this re-encrypts every message's content, reasoning and raw body, every tool call's
arguments, every feedback comment, every stored ``Idempotency-Key`` answer and every share link's
snapshot with the new key; then the old keys can be removed.
Rows stored in plain text (before encryption was turned on) are encrypted on the way. Rows
are read and written in batches by primary key, each batch in its own transaction.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from ...models import ChatShare, Feedback, IdempotencyKey, Message, ToolCall
from ...models.protected import configured_keys, fernet

TABLES = (
    (Message, ("content", "thinking_text", "raw")),
    (ToolCall, ("arguments",)),
    (Feedback, ("comment",)),
    (IdempotencyKey, ("response_body",)),
    (ChatShare, ("snapshot",)),
)


class Command(BaseCommand):
    help = (
        "Re-encrypt message content, reasoning, raw bodies and tool call arguments with the "
        "first key of LLMCHAT['ENCRYPTION_KEYS'] (plain-text rows are encrypted too)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=500, help="Rows per transaction.")

    def handle(self, *args, batch_size: int = 500, **options):
        if not configured_keys():
            raise CommandError("LLMCHAT['ENCRYPTION_KEYS'] is empty: there is no key to use.")
        fernet()  # a bad key fails here, before any row is read
        for model, fields in TABLES:
            done, last = 0, 0
            while True:
                with transaction.atomic():
                    rows = list(
                        model.objects.filter(pk__gt=last)
                        .order_by("pk")
                        .only("pk", *fields)[:batch_size]
                    )
                    if not rows:
                        break
                    # read decrypted (any key), written back with the first key
                    model.objects.bulk_update(rows, fields)
                done += len(rows)
                last = rows[-1].pk
            self.stdout.write(f"{model._meta.label}: {done} rows re-encrypted")
