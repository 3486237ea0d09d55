"""What ``POST ui/chat`` reads of a UI message: its text and file parts (the rules of a
REST message), and its answers to approvals."""

import base64

import pytest
from rest_framework.exceptions import ValidationError

from django_llmchat.api.ui.requests import UIChatSerializer, approvals_of, prompt_of

pytestmark = pytest.mark.django_db


def test_text_parts_join_and_files_decode():
    data = base64.b64encode(b"hello").decode()
    message = {
        "parts": [
            {"type": "text", "text": "One"},
            {"type": "step-start"},
            {"type": "text", "text": "Two"},
            {"type": "file", "url": f"data:text/plain;base64,{data}", "filename": "a.txt"},
        ]
    }
    text, files = prompt_of(message)
    assert text == "One\n\nTwo"
    assert [name for name, *_ in files] == ["a.txt"]


@pytest.mark.parametrize(
    "part, reason",
    [
        ({"type": "text", "text": 3}, "part 0: text must be a string"),
        (
            {"type": "file", "url": "https://x/a.png"},
            "part 0: a file part's url must be a base64 data: URL",
        ),
        (
            {"type": "file", "url": "data:image/png;base64,@@"},
            "part 0: the data: URL is not base64",
        ),
    ],
)
def test_bad_parts_are_refused_on_the_field(part, reason):
    with pytest.raises(ValidationError) as found:
        prompt_of({"parts": [part]}, field="message")
    assert found.value.detail == {"message": [reason]}


def test_approvals_of_an_assistant_message():
    parts = [
        {"type": "text", "text": "ignored"},
        {
            "type": "tool-x",
            "toolCallId": "t1",
            "state": "approval-responded",
            "approval": {"id": "c1", "approved": True},
        },
        {
            "type": "dynamic-tool",
            "state": "approval-responded",
            "approval": {"id": "c2", "approved": False},
        },
        {"type": "tool-y", "state": "approval-requested", "approval": {"id": "c3"}},
    ]
    assert approvals_of({"parts": parts}) == [("c1", "approved", "t1"), ("c2", "denied", "c2")]


def test_the_body_needs_a_message_and_an_id_a_url_can_carry():
    serializer = UIChatSerializer(data={"id": "a/b", "messages": []})
    assert not serializer.is_valid()
    assert set(serializer.errors) == {"id"}
    serializer = UIChatSerializer(data={"id": "ok", "messages": []})
    assert not serializer.is_valid()
    assert serializer.errors == {"messages": ["send at least the new message"]}
