"""Chat Completions fields read alike from a whole ``chat.completion`` (:mod:`.openai_chat`)
and from its chunks (:mod:`.openai_chat_stream`): ``finish_reason``, ``usage`` (cache
counts as OpenAI, DeepSeek and OpenRouter report them), reasoning parts of the content,
citations, tool call ids and arguments."""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..values import Citation, Tokens

# Wire finish_reason -> FinishReasonDone vocabulary (seed 001). Anything else is "other".
FINISH_REASONS: dict[str, str] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "function_call": "tool_calls",
    "model_length": "length",  # Mistral: the model's context is full
    "error": "error",  # Mistral
    "insufficient_system_resource": "error",  # DeepSeek
}


def finish_reason(raw: str | None, *, tool_calls: bool, refusal: bool = False) -> str:
    """Normalize a wire finish reason; a refusal reads as ``content_filter``."""
    if refusal:
        return "content_filter"
    if raw is None:
        return "tool_calls" if tool_calls else "stop"
    reason = FINISH_REASONS.get(raw, "other")
    # Some servers report "stop" on a turn that called tools.
    return "tool_calls" if tool_calls and reason == "stop" else reason


def usage_tokens(usage: dict[str, Any] | None) -> Tokens:
    """Chat Completions usage -> :class:`Tokens`.

    ``prompt_tokens`` includes cached (and OpenRouter's cache-write) tokens, so they are
    taken out of ``input_tokens``; ``completion_tokens`` already includes reasoning.
    """
    if not usage:
        return Tokens()
    prompt = usage.get("prompt_tokens")
    prompt_details = usage.get("prompt_tokens_details") or {}
    cached = prompt_details.get("cached_tokens")
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")  # DeepSeek
    written = prompt_details.get("cache_write_tokens")
    completion_details = usage.get("completion_tokens_details") or {}
    return Tokens(
        input_tokens=None if prompt is None else prompt - (cached or 0) - (written or 0),
        output_tokens=usage.get("completion_tokens"),
        cache_read_tokens=cached,
        cache_write_tokens=written or None,
        thinking_tokens=completion_details.get("reasoning_tokens"),
    )


def split_content(content: Any) -> tuple[str, str]:
    """``(text, reasoning)`` from a content string or a list of parts (Mistral's
    Magistral answers ``[{"type": "thinking", ...}, {"type": "text", ...}]``)."""
    if content is None:
        return "", ""
    if isinstance(content, str):
        return content, ""
    text: list[str] = []
    reasoning: list[str] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            text.append(part.get("text") or "")
        elif kind == "thinking":
            inner = part.get("thinking")
            if isinstance(inner, list):
                inner = "".join(p.get("text", "") for p in inner if isinstance(p, dict))
            reasoning.append(inner or "")
    return "".join(text), "".join(reasoning)


def citations_of(data: dict[str, Any], message: dict[str, Any] | None = None) -> list[Citation]:
    """Perplexity's ``search_results`` / ``citations`` and OpenAI-style url annotations."""
    out: list[Citation] = []
    for result in data.get("search_results") or ():
        if isinstance(result, dict) and result.get("url"):
            meta = {"date": result["date"]} if result.get("date") else {}
            out.append(Citation(url=result["url"], title=result.get("title"), metadata=meta))
    if not out:
        out = [Citation(url=url) for url in data.get("citations") or () if isinstance(url, str)]
    for note in (message or {}).get("annotations") or ():
        cite = note.get("url_citation") if isinstance(note, dict) else None
        if cite and cite.get("url"):
            out.append(
                Citation(
                    url=cite["url"],
                    title=cite.get("title"),
                    start_index=cite.get("start_index"),
                    end_index=cite.get("end_index"),
                )
            )
    return out


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def wire_call_id(value: Any) -> str | None:
    """A call id as the server sent it: ``None`` when it sent none (absent or ``null``),
    else the string itself, even empty. Ids may repeat within one response (LiteLLM,
    servers numbering calls ``call_0``...): they are kept, never made unique."""
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def arguments_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
