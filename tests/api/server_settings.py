"""Settings of a live server for fuzzing the API (``.ci/schemathesis.sh``) and for the
generated clients (``tests/api/test_generated_clients.py``): the test
settings, a SQLite file, and replies from a loopback fake provider started here."""

import os

from django_llmchat.testing import FakeProviderServer
from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("LLMCHAT_API_DB", "api-fuzz.sqlite3"),
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

_provider = FakeProviderServer().start()
LLMCHAT = _provider.llmchat_settings(
    "openai",
    "gpt-4.1-mini",
    # one request at a time on SQLite: the run happens in the request that queued it
    TASKS_EAGER_WITHOUT_BROKER="inline",
)

# LLMCHAT_API_TOOLS=1: a project with a tool (``moon_phase``, tests/api/server_tools.py)
# and an MCP server (``almanac``); =2: the same project a release later, with one more
# of each (``tide_times``, ``notes``). Nothing connects to the MCP servers until a run
# lists their tools.
_TOOLS = os.environ.get("LLMCHAT_API_TOOLS")
if _TOOLS:
    LLMCHAT["TOOL_MODULES"] = ["tests.api.server_tools"]
    LLMCHAT["MCP_SERVERS"] = {"almanac": {"url": "http://127.0.0.1:9/mcp/"}}
    if _TOOLS == "2":
        LLMCHAT["MCP_SERVERS"]["notes"] = {"url": "http://127.0.0.1:9/notes/mcp/"}
