import pytest

from django_llmchat.context import Context
from django_llmchat.errors import ArgumentError, LLMChatError
from django_llmchat.skills import SkillsContext
from django_llmchat.values import Tokens


def test_reads():
    ctx = Context({"user_id": 42, "tenant": {"plan": {"name": "pro"}}, "items": [1, 2]})
    assert ctx["user_id"] == 42
    assert ctx["missing"] is None
    assert ctx.dig("tenant", "plan", "name") == "pro"
    assert ctx.dig("tenant", "nope", "name") is None
    assert ctx.dig("items", 1) == 2
    assert ctx.skills is None and ctx.token_usage is None
    assert Context(user_id=7)["user_id"] == 7


@pytest.mark.parametrize("key", ["skills", "token_usage"])
def test_reserved_keys_rejected(key):
    with pytest.raises(ArgumentError, match=f"Reserved keys cannot be passed in context: {key}"):
        Context({key: None})
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, LLMChatError)


def test_typed_setters():
    ctx = Context()
    ctx.skills = SkillsContext()
    ctx.token_usage = Tokens(1, 2)
    assert ctx.token_usage == Tokens(1, 2)
    with pytest.raises(ArgumentError, match="skills must be"):
        ctx.skills = {"a": 1}
    with pytest.raises(ArgumentError, match="token_usage must be"):
        ctx.token_usage = {"input_tokens": 1}
    ctx.skills = None
    ctx.token_usage = None


def test_data_is_copied():
    data = {"user_id": 1}
    ctx = Context(data)
    data["user_id"] = 2
    assert ctx["user_id"] == 1
    out = ctx.to_dict()
    out["user_id"] = 3
    assert ctx["user_id"] == 1
    assert out.keys() == {"user_id", "skills", "token_usage"}
    assert ctx.caller_data() == {"user_id": 1}
