"""What every wire format shares: frame helpers and the :class:`Renderer` base."""

from __future__ import annotations

import json
import uuid
from typing import Any

from .values import Fault, RecordedRequest, Reply

# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _rand(n: int = 24) -> str:
    return uuid.uuid4().hex[:n]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _n(value: int | None) -> int:
    return value or 0


def sse(data: str, event: str | None = None, sep: str = "\n\n") -> bytes:
    """One Server-Sent Events frame."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}{sep}".encode()


ERROR_TEXT = {
    400: "Invalid request.",
    401: "Incorrect API key provided.",
    403: "Permission denied.",
    404: "Not found.",
    408: "Request timed out.",
    413: "Request too large.",
    429: "Rate limit reached. Please try again later.",
    500: "The server had an error while processing your request.",
    502: "Bad gateway.",
    503: "The service is temporarily unavailable.",
    504: "Gateway timeout.",
    529: "Overloaded",
}


def error_text(status: int) -> str:
    return ERROR_TEXT.get(status, f"HTTP {status}")


# --------------------------------------------------------------------------------------
# Renderers
# --------------------------------------------------------------------------------------


class Renderer:
    """Renders replies and errors in one wire format."""

    format: str = ""
    frame_separator = "\n\n"
    content_type = "application/json"

    def body(self, reply: Reply, request: RecordedRequest) -> dict[str, Any]:
        """The whole (non-streaming) JSON answer."""
        raise NotImplementedError

    def frames(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        """The streamed answer, one SSE frame per item; the last is the terminal one."""
        raise NotImplementedError

    def error_frames(self, fault: Fault, request: RecordedRequest) -> list[bytes]:
        """The vendor's mid-stream error."""
        raise NotImplementedError

    def error_body(self, status: int, fault: Fault | None, message: str | None = None) -> Any:
        """The vendor's body for an HTTP error status."""
        raise NotImplementedError

    def encode_body(self, reply: Reply, request: RecordedRequest) -> bytes:
        return _dumps(self.body(reply, request)).encode()

    def model(self, reply: Reply, request: RecordedRequest) -> str:
        return reply.model or request.model or "fake-model"

    def request_id_header(self) -> dict[str, str]:
        return {"x-request-id": f"req_{_rand()}"}
