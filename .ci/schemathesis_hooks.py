"""A check of .ci/schemathesis.sh beside schemathesis' own: a request the schema allows
that a route refuses with its documented 400 (.ci/schemathesis.toml lists those routes)
must be refused for a rule no JSON Schema states, named here by field and reason. Any
other 400 to a schema-valid request is a failure: the schema could have said it.

The rules: the database's state (credentials that log in, a message that is no reply, a
model's output limit in the registry), the bytes of a file (its sniffed type), names the
schema leaves open so that adding one breaks no generated client (tools, ``mcp:``
servers), and what free-form JSON values hold at any depth (NUL characters, nesting)."""

from __future__ import annotations

import re

import schemathesis

_JSON = r"^(strings must not contain NUL|keys must be strings without NUL|nested deeper than)"
# A UI message's parts are open objects in the schema, as the AI SDK's are (it adds part
# types between versions); which message is sent is the last of `messages` (JSON Schema
# states no rule of an array's last item), and an approval names a tool call of the chat;
# the messages before the last must be the chat's own, in the order of one of its paths.
_UI = (
    r"^(part \d+: |the text |the last message must be |the chat has no tool call "
    r"|message \d+ \(.*\) is not a message of the chat|the messages before the last are not )"
)
RULES: dict[str, dict[str, str]] = {
    "tools": {"*": r"^unknown tools: "},
    "params": {"*": rf"max_tokens must be at most \d+ for |{_JSON}"},
    "context": {"*": _JSON},
    "parent": {"POST /api/chats/{id}/messages/": r"is not a message of chat \d+$"},
    "attachments": {"*": r"is not allowed \(allowed: |does not match its content|file is empty"},
    "non_field_errors": {"POST /api/auth/token/": r"^Unable to log in with provided credentials"},
    "message": {
        "POST /api/chats/{id}/messages/{message_id}/feedback/": r"must be an assistant reply",
        "POST /api/ui/chat": _UI,
        "POST /api/chats/{id}/fork/": (
            r"is no message of a branch of chat \d+$|there is nothing to fork$"
        ),
    },
    "messages": {"POST /api/ui/chat": _UI},
    "trigger": {"POST /api/ui/chat": r"^the chat has no reply to regenerate"},
}


@schemathesis.check
def refused_only_for_rules_no_schema_states(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    label = f"{case.method.upper()} {case.operation.path}"
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if isinstance(body, str):  # the AI SDK's routes answer "<field>: <reason>" as text
        field, _, reason = body.partition(": ")
        body = {field: [reason]}
    if not isinstance(body, dict):
        raise AssertionError(f"{label}: a schema-valid request refused: {body!r}"[:500])
    for field, reasons in body.items():
        rules = RULES.get(field, {})
        pattern = rules.get(label) or rules.get("*")
        items = reasons if isinstance(reasons, list) else [reasons]
        for reason in items:
            if pattern is None or not re.search(pattern, str(reason)):
                raise AssertionError(
                    f"{label}: a schema-valid request refused for a reason the schema could "
                    f"state: {field}: {str(reason)[:300]}"
                )
    return None
