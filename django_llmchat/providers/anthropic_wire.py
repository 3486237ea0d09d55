"""Words of the Anthropic Messages API that :mod:`.anthropic` and
:mod:`.anthropic_stream` both read: ``stop_reason``, ``usage``, citation blocks, and the
server tools' uses and results (web search, MCP)."""

from __future__ import annotations

from typing import Any

from ..values import Citation, Tokens

# Anthropic ``stop_reason`` -> ``FinishReasonDone.finish_reason``; unknown values -> "other".
FINISH_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "model_context_window_exceeded": "context_window",
    "pause_turn": "other",
}


SERVER_TOOL_USES = ("server_tool_use", "mcp_tool_use")


def finish_reason(raw: str | None, *, tool_calls: bool = False, structured: bool = False) -> str:
    """The event finish reason for an Anthropic ``stop_reason``. A turn that called tools
    is ``tool_calls`` whatever the wire says (a proxy may report ``end_turn``), as for Chat
    Completions; a turn whose only call was the structured-output tool is ``stop``."""
    if structured and raw == "tool_use" and not tool_calls:
        return "stop"
    reason = "stop" if raw is None else FINISH_REASONS.get(raw, "other")
    return "tool_calls" if tool_calls and reason == "stop" else reason


def usage_tokens(usage: dict[str, Any] | None) -> Tokens:
    """``Tokens`` from an Anthropic ``usage`` object (cache counts are outside input)."""
    usage = usage or {}
    details = usage.get("output_tokens_details") or {}
    return Tokens(
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        cache_read_tokens=usage.get("cache_read_input_tokens"),
        cache_write_tokens=usage.get("cache_creation_input_tokens"),
        thinking_tokens=details.get("thinking_tokens"),
    )


def to_citation(raw: dict[str, Any], start: int | None, end: int | None) -> Citation:
    """A ``Citation`` from one entry of a text block's ``citations``.

    ``start_index``/``end_index`` locate the citing text block inside the reply's content;
    the location inside the cited document (characters, pages, blocks) is in ``metadata``.
    """
    source = raw.get("source") or raw.get("file_id")
    if source is None and raw.get("document_index") is not None:
        source = f"document:{raw['document_index']}"
    skip = {"url", "title", "cited_text", "source", "encrypted_index"}
    return Citation(
        url=raw.get("url"),
        title=raw.get("title") or raw.get("document_title"),
        cited_text=raw.get("cited_text"),
        start_index=start,
        end_index=end,
        source=source,
        metadata={k: v for k, v in raw.items() if k not in skip and v is not None},
    )


def is_server_result(block: dict[str, Any]) -> bool:
    """A result block of a tool Anthropic ran itself (``web_search_tool_result``...)."""
    return str(block.get("type")).endswith("_tool_result") and bool(block.get("tool_use_id"))


def add_server_result(calls: dict[str, dict[str, Any]], block: dict[str, Any]) -> dict[str, Any]:
    """Attach a server tool result block to its call in ``calls`` (keyed by id)."""
    call = calls.setdefault(block["tool_use_id"], {"name": block["type"][: -len("_tool_result")]})
    call["id"] = block["tool_use_id"]
    content = block.get("content")
    if isinstance(content, dict) and content.get("error_code"):
        call["result"], call["status"] = {"error_code": content["error_code"]}, "failed"
    elif block.get("is_error"):
        call["result"], call["status"] = content, "failed"
    elif block["type"] == "web_search_tool_result":
        call["result"], call["status"] = web_sources(content), "completed"
    else:
        call["result"], call["status"] = content, "completed"
    return call


def web_sources(content: Any) -> list[dict[str, Any]]:
    """``{"title", "url"}`` (plus ``page_age``) of each web search result."""
    if not isinstance(content, list):
        return []
    out = []
    for item in content:
        if isinstance(item, dict) and item.get("url"):
            source = {"title": item.get("title"), "url": item["url"]}
            if item.get("page_age"):
                source["page_age"] = item["page_age"]
            out.append(source)
    return out
