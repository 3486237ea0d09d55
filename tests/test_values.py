from decimal import Decimal

from django_llmchat.values import Citation, Cost, ServerToolCall, Thinking, Tokens


def test_tokens_total_and_add():
    t = Tokens(
        input_tokens=10,
        output_tokens=5,
        cache_read_tokens=3,
        cache_write_tokens=2,
        thinking_tokens=4,
    )
    assert t.total_tokens == 20  # thinking is inside output
    assert Tokens().total_tokens is None
    assert Tokens(1) + Tokens(None, 2) == Tokens(1, 2)
    assert Tokens(1, 1) + Tokens(2, 2) == Tokens(3, 3)
    assert sum([Tokens(1), Tokens(2)], Tokens()) == Tokens(3)
    assert sum([Tokens(1), Tokens(2)]) == Tokens(3)
    assert Tokens(1, None).to_dict() == {"input_tokens": 1}
    assert Tokens.from_dict({"input_tokens": 4}) == Tokens(4)


def test_cost():
    c = Cost(input=Decimal("1"), total=Decimal("1")) + Cost(output=Decimal("2"), total=None)
    assert c == Cost(input=Decimal("1"), output=Decimal("2"), total=Decimal("1"))
    assert Cost().total is None and not Cost().is_known
    assert Cost.from_dict(Cost(total=Decimal("0.5")).to_dict()) == Cost(total=Decimal("0.5"))


def test_small_values():
    assert Thinking("t", "s").to_dict() == {"text": "t", "signature": "s"}
    assert Citation(url="u").to_dict() == {"url": "u"}
    assert Citation.from_dict({"url": "u", "extra": 1}) == Citation(url="u")
    assert ServerToolCall(name="web_search").to_dict() == {"name": "web_search"}
