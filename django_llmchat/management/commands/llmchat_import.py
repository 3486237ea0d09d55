"""``manage.py llmchat_import <file> --user <user> [--format auto|chatgpt|llmchat]``: read
ChatGPT's data export (``conversations.json`` or its ``.zip``) or a django-llmchat export
(``llmchat_export_user``) into new chats of a user (:mod:`django_llmchat.chats.imports`)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from ...chats.imports import ImportFormatError, import_file
from ._users import find_user


class Command(BaseCommand):
    help = (
        "Import ChatGPT's conversations.json (or the export's .zip) or a django-llmchat "
        "export as new chats of a user. Nothing is sent to a provider."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "file",
            help="conversations.json, the ChatGPT export's .zip, or a llmchat_export_user file.",
        )
        parser.add_argument(
            "--user", required=True, help="The owner's username (or primary key, with --pk)."
        )
        parser.add_argument("--pk", action="store_true", help="--user is the primary key.")
        parser.add_argument(
            "--format",
            choices=["auto", "chatgpt", "llmchat"],
            default="auto",
            help="The file's format (default: told apart by its shape).",
        )

    def handle(self, *args, file: str, user: str, pk: bool = False, format="auto", **options):
        owner = find_user(user, pk=pk)
        try:
            imported = import_file(file, user=owner, format=format)
        except OSError as exc:
            raise CommandError(f"{file}: {exc.strerror or exc}") from None
        except ImportFormatError as exc:
            raise CommandError(f"{file}: {exc}") from None
        for note in imported.notes:
            self.stderr.write(f"note: {note}")
        messages = sum(chat.messages.count() for chat in imported.chats)
        self.stdout.write(
            f"Imported {len(imported.chats)} chat{'s' if len(imported.chats) != 1 else ''} "
            f"({messages} messages) for {owner.get_username()}."
        )
