from django_llmchat.events import TextDelta


def test_text_delta():
    assert TextDelta("Hi").to_dict() == {"role": "assistant", "content": "Hi"}
