"""Agents (``agents.py``): instructions, tools and max steps; one defined in a shell is
refused."""

import json

import pytest

from django_llmchat.agents import Agent
from django_llmchat.errors import ArgumentError
from django_llmchat.events import (
    Interrupt,
)
from django_llmchat.models import Chat, ToolCall
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call

from .test_tools_agents import add

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    return Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")


class Calculator(Agent):
    model = "gpt-4.1-mini"
    provider = "openai"
    instructions = "You add numbers."
    tools = [add]
    max_steps = 2


def test_agent_instructions_tools_and_max_steps(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Calculator.start_chat()
    assert chat.agent == f"{__name__}.Calculator"
    fake_llm.script(*[Reply(tool_calls=[Call("add", {"a": i})]) for i in range(3)])
    events = list(Chat.objects.get(pk=chat.pk).stream("count"))
    assert events[-2] == Interrupt(reason="max_steps") and events[-1].status == "interrupted"
    body = fake_llm.requests[0].body
    assert "You add numbers." in json.dumps(body)
    assert "add" in json.dumps(body["tools"])
    # transcript is valid: every call answered
    assert all(tc.get_result() is not None for tc in ToolCall.objects.all())
    # complete() resumes after the interrupt
    fake_llm.script(Reply("The answer is 3."))
    assert chat.complete().content == "The answer is 3."


@pytest.mark.django_db
def test_an_agent_defined_in_a_shell_is_refused_naming_where_it_must_live():
    """A class pasted into ``manage.py shell`` (or defined in a function) has a dotted
    path nothing can import: ``start_chat`` says so before a chat is stored, instead of
    a worker failing later with "cannot import agent"."""
    shell: dict = {"__name__": "__main__"}
    exec(
        "from django_llmchat.agents import Agent\n"
        "class Pasted(Agent):\n"
        "    model = 'gpt-4.1-mini'\n",
        shell,
    )

    class Local(Agent):
        model = "gpt-4.1-mini"

    for agent in (shell["Pasted"], Local):
        with pytest.raises(ArgumentError, match=r"define the class in a module of your project"):
            agent.start_chat()
    assert not Chat.objects.exists()
