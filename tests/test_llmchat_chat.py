"""``manage.py llmchat_chat``: the terminal chat, driven with a fake stdin."""

import io

import pytest
from django.core.management import CommandError, call_command

from django_llmchat.models import Chat, Usage
from django_llmchat.testing import Fault, Reply, ToolCall
from django_llmchat.tools import tool

pytestmark = pytest.mark.django_db(transaction=True)


@tool
def cli_weather(city: str) -> str:
    """Gets the weather for a city"""
    return f"18C and sunny in {city}"


@tool(requires_approval=True)
def cli_delete(path: str) -> str:
    """Deletes a file"""
    return f"deleted {path}"


def run(*lines: str, **options) -> str:
    out = io.StringIO()
    stdin = io.StringIO("".join(line + "\n" for line in lines))
    call_command("llmchat_chat", stdin=stdin, stdout=out, **options)
    return out.getvalue()


def test_streams_a_reply_and_prints_usage(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(
        Reply("Paris is the capital.", usage={"input_tokens": 12, "output_tokens": 5}),
    )
    output = run("What is the capital of France?", "/quit")

    chat = Chat.objects.get()
    assert chat.title == "Terminal chat"
    assert (chat.provider, chat.model_id) == ("openai", "gpt-4.1-mini")
    assert f"Chat {chat.pk} with openai/gpt-4.1-mini" in output
    assert "assistant> Paris is the capital.\n" in output
    assert "[tokens: 12 in, 5 out, cost: $" in output
    assert [m.role for m in chat.transcript()] == ["user", "assistant"]
    assert "\x1b[" not in output  # no colours when stdout is not a terminal
    assert fake_llm.requests[0].stream is True


def test_shows_tool_calls_and_results_then_the_answer(fake_llm):
    fake_llm.configure("anthropic", "claude-haiku-4-5")
    fake_llm.script(
        Reply(tool_calls=[ToolCall("cli_weather", {"city": "Rome"})], thinking="Check it."),
        Reply("Sunny in Rome.", thinking="It is sunny."),
    )
    output = run("Weather in Rome?", tool=["cli_weather"])

    assert '→ cli_weather({"city":"Rome"})' in output or '→ cli_weather({"city": "Rome"})' in output
    assert "← cli_weather: 18C and sunny in Rome" in output
    assert output.index("← cli_weather") < output.index("Sunny in Rome.")
    assert "Check it." not in output  # thinking is shown on a terminal only
    chat = Chat.objects.get()
    assert chat.tools == ["cli_weather"]
    assert [m.role for m in chat.transcript()] == ["user", "assistant", "tool", "assistant"]


def test_continues_a_chat_and_switches_model(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(title="Old", provider="openai", model_id="gpt-4.1-mini")
    chat.add_message(role="user", content="Hi")
    chat.add_message(role="assistant", content="Hello.")
    fake_llm.script(Reply("Again."))
    output = run("Once more", chat=chat.pk, provider="anthropic", model="claude-haiku-4-5")

    chat.refresh_from_db()
    assert (chat.provider, chat.model_id) == ("anthropic", "claude-haiku-4-5")
    assert f"Chat {chat.pk} with anthropic/claude-haiku-4-5" in output
    assert fake_llm.requests[0].format == "anthropic"
    assert [m.content for m in chat.transcript()] == ["Hi", "Hello.", "Once more", "Again."]


def test_unknown_chat_is_an_error(fake_llm):
    fake_llm.configure()
    with pytest.raises(CommandError, match="no chat with id 999"):
        run("/quit", chat=999)


def test_commands_and_end_of_input(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    output = run("", "/help", "/nope", "/usage")  # then end of input
    assert "/quit, /exit" in output
    assert "Unknown command /nope" in output
    assert "tokens: not reported, cost: unknown" in output
    assert fake_llm.requests == []


def test_approval_is_asked_in_the_terminal(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(
        Reply(tool_calls=[ToolCall("cli_delete", {"path": "/tmp/x"})]),
        Reply("Done, it is gone."),
        Reply(tool_calls=[ToolCall("cli_delete", {"path": "/etc"})]),
        Reply("Fine, I left it."),
    )
    output = run("Delete /tmp/x", "y", "Delete /etc", "n", tool=["cli_delete"])

    assert 'Allow cli_delete({"path": "/tmp/x"})? [y/N]' in output
    assert "← cli_delete: deleted /tmp/x" in output
    assert "Done, it is gone." in output
    assert "Fine, I left it." in output
    chat = Chat.objects.get()
    approvals = [c.approval for c in chat.tool_calls.order_by("id")]
    assert approvals == ["approved", "denied"]
    denied = chat.tool_calls.order_by("id").last().get_result()
    assert '"denied"' in denied.content


class InterruptingOutput(io.StringIO):
    """Raises KeyboardInterrupt (as Ctrl-C would) once the reply has started."""

    def __init__(self, after: int):
        super().__init__()
        self.after = after
        self.deltas = 0
        self.armed = False

    def write(self, text):
        if self.armed and text and not text.startswith(("\n", "[", "you>")):
            self.deltas += 1
            if self.deltas == self.after:
                self.armed = False
                raise KeyboardInterrupt
        if text == "assistant> ":
            self.armed = True
        return super().write(text)


def test_ctrl_c_stops_the_reply_and_the_transcript_stays_valid(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    long_story = Reply("word " * 400, chunk_size=5)
    fake_llm.script(Fault(chunk_delay=0.005, reply=long_story), Reply("Short answer."))
    out = InterruptingOutput(after=3)
    stdin = io.StringIO("Tell me a long story\nSomething short\n")
    call_command("llmchat_chat", stdin=stdin, stdout=out)
    output = out.getvalue()

    assert "[stopped]" in output
    assert "Short answer." in output
    chat = Chat.objects.get()
    chat.refresh_from_db()
    assert chat.status == "idle"
    # the text printed before the stop is the stopped step's reply; the next turn went
    # through normally
    transcript = [(m.role, m.content, m.finish_reason) for m in chat.transcript()]
    assert [row[0] for row in transcript] == ["user", "assistant", "user", "assistant"]
    assert transcript[1][1].startswith("word") and transcript[1][2] == "cancelled"
    assert "assistant> word word" in output  # the caller had the text it was printing
    assert transcript[3][1] == "Short answer."
    # the stopped attempt keeps its usage row (tokens spent are spent)
    assert list(Usage.objects.order_by("id").values_list("status", flat=True)) == [
        "cancelled",
        "succeeded",
    ]
    assert list(chat.runs.order_by("id").values_list("status", flat=True)) == [
        "cancelled",
        "succeeded",
    ]


def test_user_owns_the_new_chat(fake_llm, django_user_model):
    ada = django_user_model.objects.create_user("ada")
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("Hello Ada."))
    run("Hi", "/quit", user="ada")
    chat = Chat.objects.get()
    assert chat.user == ada
    assert list(Chat.objects.for_user(ada)) == [chat]  # on her page and in her API


def test_user_must_exist_and_own_a_continued_chat(django_user_model):
    with pytest.raises(CommandError, match="There is no user 'nobody' \\(--user\\)"):
        run("/quit", user="nobody")
    assert not Chat.objects.exists()
    django_user_model.objects.create_user("ben")
    chat = Chat.objects.create(user=django_user_model.objects.create_user("ada"))
    with pytest.raises(CommandError, match=f"Chat {chat.pk} does not belong to 'ben'"):
        run("/quit", chat=chat.pk, user="ben")
    run("/quit", chat=chat.pk, user="ada")


def test_the_demo_model_prints_a_usd_cost(settings):
    from django_llmchat.catalog.registry import sync_models

    settings.LLMCHAT = {
        "DEFAULT_PROVIDER": "demo",
        "DEFAULT_MODEL": "demo-model",
        "PROVIDERS": {"demo": {"class": "django_llmchat.testing.demo.DemoProvider"}},
    }
    sync_models()
    output = run("Hello demo", "/usage", "/quit")
    assert "cost: unknown" not in output
    [reply_usage] = [line for line in output.splitlines() if line.startswith("[tokens:")]
    assert ", cost: $0.0" in reply_usage
    assert f"chat {Chat.objects.get().pk}: tokens: " in output and "cost: $0.0" in output
