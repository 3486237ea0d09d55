"""Skills (``skills.py``) in a run."""

import json

import pytest

from django_llmchat.agents import Agent
from django_llmchat.events import (
    SkillActivation,
)
from django_llmchat.models import Chat
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    return Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")


def test_skills(fake_llm, tmp_path):
    skill = tmp_path / "code-review"
    skill.mkdir()
    (skill / "SKILL.md").write_text(
        "---\nname: code-review\ndescription: Reviews code\n---\nCheck for bugs first."
    )

    class Reviewer(Agent):
        skills = [str(tmp_path)]

    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    from django_llmchat.loop.runner import Runner

    fake_llm.script(
        Reply(tool_calls=[Call("skill_activate", {"name": "code-review"})]), Reply("Reviewed.")
    )
    chat.add_message(role="user", content="review this")
    runner = Runner(chat)
    runner.agent = Reviewer()
    from django_llmchat.skills import load_skills

    runner.context.skills = load_skills(Reviewer.skills)
    runner.begin(None)  # a run continuing the saved history
    events = list(runner.run())
    assert SkillActivation("code-review") in events
    assert "Check for bugs first." in chat.messages.get(role="tool").content
    assert "code-review: Reviews code" in json.dumps(fake_llm.requests[0].body)
    assert runner.context.skills.activated == ["code-review"]
