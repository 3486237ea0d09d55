"""Settings of a live server for fuzzing the API (``.ci/schemathesis.sh``): the test
settings, a SQLite file, and replies from a loopback fake provider started here."""

import os

from django_llmchat.testing import FakeProviderServer
from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("LLMCHAT_API_DB", "api-fuzz.sqlite3"),
        "OPTIONS": {"timeout": 30},
    }
}

_provider = FakeProviderServer().start()
LLMCHAT = _provider.llmchat_settings(
    "openai",
    "gpt-4.1-mini",
    # one request at a time on SQLite: the run happens in the request that queued it
    TASKS_EAGER_WITHOUT_BROKER="inline",
)
