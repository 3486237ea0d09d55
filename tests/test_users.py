"""The user a data command is about (``management/commands/_users.py``): by username, or
by primary key with ``--pk``; anything else is a ``CommandError`` naming what was looked
up."""

from __future__ import annotations

import argparse

import pytest
from django.core.management.base import CommandError

from django_llmchat.management.commands._users import add_user_argument, find_user

pytestmark = pytest.mark.django_db


def test_by_username_or_primary_key(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    django_user_model.objects.create_user(str(alice.pk))  # a username that looks like a pk
    assert find_user("alice") == alice
    assert find_user(str(alice.pk), pk=True) == alice
    assert find_user(str(alice.pk)).username == str(alice.pk)


@pytest.mark.parametrize(
    "name, pk, message",
    [
        ("nobody", False, "No user with username 'nobody'."),
        ("999999", True, "No user with primary key '999999'."),
        ("not-a-number", True, "No user with primary key 'not-a-number'."),
    ],
)
def test_an_unknown_user_is_a_command_error(name, pk, message):
    with pytest.raises(CommandError) as error:
        find_user(name, pk=pk)
    assert str(error.value) == message


def test_the_arguments():
    parser = argparse.ArgumentParser()
    add_user_argument(parser)
    assert vars(parser.parse_args(["bob"])) == {"user": "bob", "pk": False}
    assert vars(parser.parse_args(["7", "--pk"])) == {"user": "7", "pk": True}
