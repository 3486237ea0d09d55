"""What a tag is (``tags.py``): a bad tag is an argument error and changes nothing."""

from __future__ import annotations

import pytest

from django_llmchat.errors import ArgumentError
from django_llmchat.models import Chat

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "tags", [["a,b"], [""], [" lead"], ["x" * 65], [1], "work", ["ok", "bad\x00"]]
)
def test_bad_tags_are_an_argument_error_and_change_nothing(tags):
    chat = Chat.objects.create(title="t").set_tags(["kept"])
    with pytest.raises(ArgumentError):
        chat.set_tags(tags)
    assert Chat.objects.get(pk=chat.pk).tags == ["kept"]
