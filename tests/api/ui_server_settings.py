"""Settings of a live server for the JavaScript clients (``tests/test_js_clients.py``): the
test settings, a SQLite file, the demo model's replies from a loopback fake provider
started here (tool calls, an approval, reasoning) and live events on Redis."""

import os

from django_llmchat.testing import FakeProviderServer
from django_llmchat.testing.demo import demo_responder
from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["LLMCHAT_API_DB"],
        "OPTIONS": {"timeout": 30},
    }
}

_provider = FakeProviderServer(
    responder=demo_responder, default=None, chunk_delay=float(os.environ.get("CHUNK_DELAY", "0"))
).start()
LLMCHAT = _provider.llmchat_settings(
    "openai",
    "gpt-4.1-mini",
    EVENTS_URL=os.environ["REDIS_URL"],
    EVENTS_KEY_PREFIX=os.environ.get("EVENTS_KEY_PREFIX", "llmchat-js"),
    TASKS_EAGER_WITHOUT_BROKER="inline",
)
# the demo model answers the Chat Completions wire format
LLMCHAT["PROVIDERS"]["openai"]["api"] = "chat_completions"
