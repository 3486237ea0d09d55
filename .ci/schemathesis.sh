#!/usr/bin/env bash
# Fuzz the REST API with schemathesis against a live server: whatever the input, no 5xx,
# and every answer as the schema documents it (status codes, content types, headers,
# bodies, event streams), auth and stateful checks included, and every schema-invalid
# request refused, every valid one accepted: .ci/schemathesis.toml names the routes whose
# documented 400 also refuses valid requests by a rule JSON Schema cannot state (credentials
# that log in, a history processor that imports, ...).
# The server runs the test settings on a SQLite file, with replies from a loopback fake
# provider; a user and a token are created first. The events endpoint is left out: it
# follows a Redis stream until the client leaves (its input checks are unit-tested).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
work="$(mktemp -d)"
export PYTHONPATH=.
export DJANGO_SETTINGS_MODULE=tests.api.server_settings
export LLMCHAT_API_DB="$work/db.sqlite3"
export LLMCHAT_API_TOOLS=1  # a registered tool and an MCP server: the schema's examples
export SCHEMATHESIS_HOOKS=.ci/schemathesis_hooks.py  # refused_only_for_rules_no_schema_states
unset DATABASE_URL

"$PY" -m django migrate --noinput >/dev/null
token="$("$PY" -m django shell -c '
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
user = get_user_model().objects.create_user("fuzz", password="fuzz")
print(Token.objects.create(user=user).key)
' | tail -n 1)"
port="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

"$PY" -m django runserver --noreload --nothreading "127.0.0.1:$port" >"$work/server.log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

status=0
.venv/bin/schemathesis --config-file .ci/schemathesis.toml run "http://127.0.0.1:$port/api/schema/?format=json" \
  --url "http://127.0.0.1:$port" \
  --wait-for-schema 30 \
  --header "Authorization: Token $token" \
  --checks all \
  --max-examples 20 \
  --workers 1 \
  --seed 1 \
  --request-timeout 30 \
  --exclude-path-regex '/events/$' \
  --suppress-health-check all \
  --warnings off || status=$?
if [ "$status" -ne 0 ]; then
  echo "== server log (last 80 lines)"
  tail -n 80 "$work/server.log"
fi
exit "$status"
