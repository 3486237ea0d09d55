"""History policies by name: the history processors and token estimators named by a
policy (built-in, registered in ``LLMCHAT["HISTORY_PROCESSORS"]`` and
``LLMCHAT["TOKEN_ESTIMATORS"]``, or dotted paths), and where a chat's policy is resolved
from (``django_llmchat/loop/history_policy.py``)."""

import pytest

from django_llmchat.errors import ArgumentError
from django_llmchat.loop.history_policy import history_options, history_processor, token_estimator
from django_llmchat.models import Chat
from django_llmchat.runs.estimates import estimate_tokens

pytestmark = pytest.mark.django_db(transaction=True)


def keep_last_four(messages, window):
    """A history processor: the system messages and the last four messages."""
    system = [m for m in messages if m.role == "system"]
    return system + [m for m in messages if m.role != "system"][-4:]


def count_words(message) -> int:
    """A token estimator: a word a token, four a message."""
    return len(message.content.split()) + 4


REGISTRIES = {
    "HISTORY_PROCESSORS": {"last_four": f"{__name__}.keep_last_four"},
    "TOKEN_ESTIMATORS": {"words": f"{__name__}.count_words", "chars": lambda m: len(m.content)},
}


def test_registered_names_resolve(settings):
    settings.LLMCHAT = REGISTRIES
    assert history_processor("last_four") is keep_last_four
    assert history_processor("window") is None
    assert token_estimator("words") is count_words
    assert token_estimator("chars") is REGISTRIES["TOKEN_ESTIMATORS"]["chars"]
    assert token_estimator(None) is estimate_tokens
    # settings, agents and Python code may still give dotted paths
    assert history_processor(f"{__name__}.keep_last_four") is keep_last_four
    assert token_estimator(f"{__name__}.count_words") is count_words


def test_a_chat_row_naming_nothing_registered_fails_without_importing(settings, monkeypatch):
    settings.LLMCHAT = REGISTRIES
    chat = Chat.objects.create(history={"strategy": "gone", "estimator": "words"})
    imported = []
    monkeypatch.setattr("django_llmchat.loop.history_policy.import_string", imported.append)
    with pytest.raises(ArgumentError, match="strategy 'gone' is not one of"):
        history_options(chat)
    assert imported == []


def test_settings_and_agents_keep_dotted_paths(settings):
    settings.LLMCHAT = {"HISTORY": {"strategy": f"{__name__}.keep_last_four"}}
    assert history_options().processor is keep_last_four

    class Agent:
        history = {"estimator": f"{__name__}.count_words"}

    assert history_options(agent=Agent()).estimate() is count_words
