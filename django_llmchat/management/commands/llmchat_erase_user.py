"""``manage.py llmchat_erase_user <user> [--yes] [--delete-user]``: erase what a user left
here (GDPR article 17): their chats with transcripts, attachment files and event streams,
their idempotency keys; their usage rows stay for the accounts, without user and title."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from ...chats.lifecycle import ErasureRefused, erase_user
from ...models import Chat, Usage
from ._users import add_user_argument, find_user


class Command(BaseCommand):
    help = (
        "Erase a user's chats (transcripts, attachment files, Redis event streams) and "
        "idempotency keys, and anonymise their usage rows (amounts kept). Asks first "
        "unless --yes; --delete-user deletes the account too."
    )

    def add_arguments(self, parser):
        add_user_argument(parser)
        parser.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
        parser.add_argument(
            "--delete-user", action="store_true", help="Delete the user account as well."
        )

    def handle(self, *args, user: str, pk=False, yes=False, delete_user=False, **options):
        found = find_user(user, pk=pk)
        chats = Chat.objects.filter(user_id=found.pk).count()
        rows = Usage.objects.filter(user_id=found.pk).count()
        name = found.get_username()
        if not yes:
            try:
                answer = input(
                    f"Erase {chats} chat{'s' if chats != 1 else ''} of {name} and anonymise "
                    f"{rows} usage row{'s' if rows != 1 else ''}"
                    f"{' and delete the account' if delete_user else ''}? Type 'yes': "
                )
            except EOFError:  # no terminal (stdin closed or empty): nobody to answer
                raise CommandError(
                    "Nothing was erased: no answer to confirm the erasure (stdin is closed or "
                    "not a terminal). Pass --yes to erase without asking, or run the command "
                    "in a terminal and type 'yes'."
                ) from None
            if answer.strip().lower() != "yes":
                raise CommandError("Nothing was erased.")
        try:
            erasure = erase_user(found)
        except ErasureRefused as exc:
            raise CommandError(str(exc)) from None
        if delete_user:
            found.delete()
        self.stdout.write(
            f"Erased {erasure.chats} chat{'s' if erasure.chats != 1 else ''} of {name} "
            f"({erasure.files} attachment files, {erasure.streams} event streams, "
            f"{erasure.idempotency_keys} idempotency keys); {erasure.usage_rows} usage rows "
            f"anonymised{'; the account is deleted' if delete_user else ''}."
        )
