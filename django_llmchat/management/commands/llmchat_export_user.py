"""``manage.py llmchat_export_user <user> [--output FILE] [--files]``: everything stored
for a user (chats, messages, tool calls, attachments, runs, usage rows) as JSON: the
answer to an access request (GDPR article 15) or a portability request (article 20)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand
from django.core.serializers.json import DjangoJSONEncoder

from ...chats.lifecycle import export_user
from ._users import add_user_argument, find_user


class Command(BaseCommand):
    help = (
        "Export a user's chats (messages, tool calls, attachments' metadata, runs) and "
        "usage rows as JSON, to stdout or --output."
    )

    def add_arguments(self, parser):
        add_user_argument(parser)
        parser.add_argument("--output", "-o", help="Write to this file instead of stdout.")
        parser.add_argument(
            "--files", action="store_true", help="Include the attachment files, base64-encoded."
        )

    def handle(self, *args, user: str, pk: bool = False, output=None, files=False, **options):
        found = find_user(user, pk=pk)
        data = export_user(found, files=files)
        text = json.dumps(data, cls=DjangoJSONEncoder, ensure_ascii=False, indent=2)
        if output:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
            entry = data["users"][0]
            self.stderr.write(
                f"Wrote {len(entry['chats'])} chats and {len(entry['usage'])} usage rows of "
                f"{found.get_username()} to {output}."
            )
        else:
            self.stdout.write(text)
