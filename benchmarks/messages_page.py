"""What a page of the transcript costs the REST API: ``GET chats/{id}/messages/`` (a page of
50, the first and the last) on a chat of 1,000 messages, beside a baseline of raw SQL
reading the same rows plus ``json.dumps`` of them.

The chat holds 250 rounds of prompt, assistant tool call, tool result and answer, each
assistant message with its usage row (the factories of the test suite). The API side is
the view itself, called with a request authenticated in advance, down to the rendered
JSON bytes (authentication, the keyset page with the chat's access check in it, the
serializers, the renderer). The baseline is three hand-written statements with their
parameters ready: the page of messages (joined to the call each tool result answers),
their tool calls (with their result ids) and their usage sums, shaped into the same dicts
and dumped. The sides alternate request by request; the ratio is of the totals, with the
range over the rounds.

    python benchmarks/messages_page.py [--requests 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from _django import setup


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200, help="pages per side per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    setup(
        extra_apps=["rest_framework", "django_filters", "drf_spectacular"],
        ROOT_URLCONF="_urls",
    )
    from django.contrib.auth import get_user_model
    from django.db import connection
    from rest_framework.test import APIRequestFactory, force_authenticate

    from django_llmchat.api.views import MessageListCreateView
    from django_llmchat.models import Chat
    from tests.factories import build_transcript

    user = get_user_model().objects.create_user("bench")
    chat = Chat.objects.create(user=user, model_id="gpt-4.1-mini", provider="openai")
    build_transcript(chat, 250, with_attachments=False)
    assert chat.messages.count() == 1000
    view = MessageListCreateView.as_view()
    factory = APIRequestFactory()

    def api_page(query: str) -> bytes:
        request = factory.get(f"/api/chats/{chat.pk}/messages/{query}")
        force_authenticate(request, user=user)
        response = view(request, pk=chat.pk)
        response.render()
        assert response.status_code == 200, response.content
        return response.content

    from django_llmchat.models import Message, ToolCall, Usage

    m, tc, u = Message._meta.db_table, ToolCall._meta.db_table, Usage._meta.db_table
    page_sql = {
        "asc": f"""SELECT m.id, m.role, m.content, m.model_id, m.provider, m.finish_reason,
            m.thinking_text, p.call_id, m.citations, m.server_tool_calls, m.input_tokens,
            m.output_tokens, m.cache_boundary, m.created_at FROM {m} m
            LEFT JOIN {tc} p ON p.id = m.parent_tool_call_id
            WHERE m.chat_id = %s ORDER BY m.position, m.id LIMIT 51""",
        "desc": f"""SELECT m.id, m.role, m.content, m.model_id, m.provider, m.finish_reason,
            m.thinking_text, p.call_id, m.citations, m.server_tool_calls, m.input_tokens,
            m.output_tokens, m.cache_boundary, m.created_at FROM {m} m
            LEFT JOIN {tc} p ON p.id = m.parent_tool_call_id
            WHERE m.chat_id = %s ORDER BY m.position DESC, m.id DESC LIMIT 51""",
    }
    calls_sql = f"""SELECT c.message_id, c.call_id, c.name, c.arguments, c.approval, r.id,
        r.content FROM {tc} c LEFT JOIN {m} r ON r.parent_tool_call_id = c.id
        WHERE c.message_id IN (%s) ORDER BY c.id"""
    usage_sql = f"""SELECT message_id, SUM(input_tokens), SUM(output_tokens),
        SUM(total_cost) FROM {u} WHERE message_id IN (%s) GROUP BY message_id"""

    def raw_page(order: str) -> bytes:
        with connection.cursor() as cursor:
            cursor.execute(page_sql[order], [chat.pk])
            rows = cursor.fetchall()[:50]
            if order == "desc":
                rows.reverse()
            ids = [r[0] for r in rows]
            marks = ",".join(["%s"] * len(ids))
            cursor.execute(calls_sql % marks, ids)
            calls: dict[int, list] = {}
            for mid, call_id, name, arguments, approval, rid, rcontent in cursor.fetchall():
                calls.setdefault(mid, []).append(
                    {
                        "id": call_id,
                        "name": name,
                        "arguments": json.loads(arguments)
                        if isinstance(arguments, str)
                        else arguments,
                        "approval": approval,
                        "result": {"message_id": rid, "content": rcontent} if rid else None,
                    }
                )
            cursor.execute(usage_sql % marks, ids)
            usage = {r[0]: r[1:] for r in cursor.fetchall()}
        results = []
        for r in rows:
            spent = usage.get(r[0])
            results.append(
                {
                    "id": r[0],
                    "role": r[1],
                    "content": r[2],
                    "model_id": r[3],
                    "provider": r[4],
                    "finish_reason": r[5],
                    "thinking": r[6] or None,
                    "tool_calls": calls.get(r[0], []),
                    "tool_call_id": r[7],
                    "citations": json.loads(r[8]) if isinstance(r[8], str) else r[8],
                    "server_tool_calls": json.loads(r[9]) if isinstance(r[9], str) else r[9],
                    "attachments": [],
                    "tokens": {"input_tokens": spent[0], "output_tokens": spent[1]}
                    if spent
                    else {},
                    "cost": {"total": str(spent[2])} if spent and spent[2] is not None else {},
                    "cache_until_here": bool(r[12]),
                    "created_at": str(r[13]),
                }
            )
        body = {"next": f"/api/chats/{chat.pk}/messages/?cursor=x", "previous": None}
        body["results"] = results
        return json.dumps(body).encode()

    # same rows on both sides
    first = json.loads(api_page(""))["results"]
    assert [r["id"] for r in first] == [r["id"] for r in json.loads(raw_page("asc"))["results"]]
    last = json.loads(api_page("?from=end"))["results"]
    assert [r["id"] for r in last] == [r["id"] for r in json.loads(raw_page("desc"))["results"]]

    count = [0]

    def counting(execute, sql, params, many, context):
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counting):
        api_page("")
    queries = count[0]

    # the sides alternate request by request, so a slow spell hits both alike
    totals = {"api": 0.0, "raw": 0.0}
    ratios = []
    clock = time.perf_counter
    for _ in range(args.rounds):
        spent = {"api": 0.0, "raw": 0.0}
        for i in range(args.requests):
            query, order = ("", "asc") if i % 2 == 0 else ("?from=end", "desc")
            start = clock()
            api_page(query)
            middle = clock()
            raw_page(order)
            spent["api"] += middle - start
            spent["raw"] += clock() - middle
        for side in totals:
            totals[side] += spent[side]
        ratios.append(spent["api"] / spent["raw"])
    n = args.requests * args.rounds
    print(f"GET chats/{{id}}/messages/ on a 1,000-message chat, pages of 50 ({n} per side)")
    print(f"  API (view, serializers, JSON):  {totals['api'] / n * 1000:7.3f} ms/page")
    print(f"  raw SQL + json.dumps:            {totals['raw'] / n * 1000:7.3f} ms/page")
    print(f"  queries per API page:            {queries}")
    print(
        f"  ratio: {totals['api'] / totals['raw']:.2f}x "
        f"(rounds {min(ratios):.2f}x-{max(ratios):.2f}x, median {statistics.median(ratios):.2f}x)"
    )


if __name__ == "__main__":
    main()
