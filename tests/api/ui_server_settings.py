"""Settings of a live server for the JavaScript clients (``tests/test_js_clients.py``): the
test settings, a SQLite file, the demo model's replies from a loopback fake provider
started here (tool calls, an approval, reasoning) and live events on Redis.

With ``LLMCHAT_PROVIDER_LOG`` set, each request the fake provider answers is appended to
that file as one JSON line (its path and body), for a test to read what the provider
was sent."""

import json
import os
import threading

from django_llmchat.testing import FakeProviderServer
from django_llmchat.testing.demo import demo_responder
from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["LLMCHAT_API_DB"],
        # as docs/deployment.md says a served SQLite database needs: WAL (readers go on
        # while one connection writes) and IMMEDIATE transactions (writers queue for the
        # lock instead of failing at once with "database is locked")
        "OPTIONS": {
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
        },
    }
}

_LOG = os.environ.get("LLMCHAT_PROVIDER_LOG")
_LOG_LOCK = threading.Lock()


def _recorded_demo_responder(request):
    if _LOG:
        line = json.dumps({"path": request.path, "body": request.body}, default=str)
        with _LOG_LOCK, open(_LOG, "a", encoding="utf-8") as log:
            log.write(line + "\n")
    return demo_responder(request)


_provider = FakeProviderServer(
    responder=_recorded_demo_responder,
    default=None,
    chunk_delay=float(os.environ.get("CHUNK_DELAY", "0")),
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
