"""The user a data command is about, named by username (or primary key with ``--pk``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError


def add_user_argument(parser) -> None:
    parser.add_argument("user", help="The user's username (or primary key, with --pk).")
    parser.add_argument("--pk", action="store_true", help="USER is the primary key.")


def find_user(name: str, *, pk: bool = False) -> Any:
    model = get_user_model()
    lookup = {"pk": name} if pk else {model.USERNAME_FIELD: name}
    try:
        return model._default_manager.get(**lookup)
    except (model.DoesNotExist, ValueError):
        how = "primary key" if pk else model.USERNAME_FIELD
        raise CommandError(f"No user with {how} {name!r}.") from None
