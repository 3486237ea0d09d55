"""Decoding streamed bodies into events: Server-Sent Events and NDJSON."""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator


class SSEDecoder:
    """Incremental Server-Sent Events decoder over raw body chunks.

    ``feed(chunk)`` returns the complete ``(event, data)`` pairs the chunk finished;
    ``flush()`` returns what is left at the end of the body. Lines end with LF, CRLF or
    CR only (never at U+2028 or the other separators ``str.splitlines`` knows), so JSON
    text holding those characters stays intact. Comment lines (``: ping``) are skipped.
    """

    __slots__ = ("_utf8", "_pending", "_tail", "_cr", "_event", "_data")

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = False  # the incremental decoder holds part of a character
        self._tail: list[str] = []
        self._cr = False
        self._event: str | None = None
        self._data: list[str] = []

    def _split(self, text: str) -> list[str]:
        if self._cr:
            text = "\r" + text
            self._cr = False
        if "\r" in text:
            if text[-1] == "\r":  # may be the first half of a CRLF
                self._cr = True
                text = text[:-1]
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if "\n" not in text:
            if text:
                self._tail.append(text)
            return []
        lines = text.split("\n")
        if self._tail:
            self._tail.append(lines[0])
            lines[0] = "".join(self._tail)
            self._tail = []
        last = lines.pop()
        if last:
            self._tail.append(last)
        return lines

    def feed(self, chunk: bytes | str) -> list[tuple[str | None, str]]:
        if isinstance(chunk, bytes):
            text = None
            if not self._pending:
                try:  # a chunk holding whole characters: the fast, common case
                    text = chunk.decode("utf-8")
                except UnicodeDecodeError:
                    pass
            if text is None:
                text = self._utf8.decode(chunk)
                self._pending = bool(self._utf8.getstate()[0])
        else:
            text = chunk
        if not text:
            return []
        if not self._tail and not self._cr and not self._data:
            event = self._one_event(text)
            if event is not None:
                return event
        return self._lines(self._split(text))

    @staticmethod
    def _one_event(text: str) -> list[tuple[str | None, str]] | None:
        """The common case, decoded without the line machinery: a chunk holding exactly
        one event, ``data: ...`` or ``event: ...`` + ``data: ...``, ended by a blank line
        (LF or CRLF). ``None`` for anything else."""
        crlf = text[-4:] == "\r\n\r\n"
        if not crlf and text[-2:] != "\n\n":
            return None
        body = text[:-4] if crlf else text[:-2]
        name = None
        if body[:6] == "event:":
            end = body.find("\n")
            if end < 0:
                return None
            head = body[: end - 1] if crlf else body[:end]
            if "\r" in head or (crlf and body[end - 1] != "\r"):
                return None
            name = head[7:] if head[6:7] == " " else head[6:]
            body = body[end + 1 :]
        if body[:5] != "data:" or "\n" in body or "\r" in body:
            return None
        return [(name, body[6:] if body[5:6] == " " else body[5:])]

    def flush(self) -> list[tuple[str | None, str]]:
        text = self._utf8.decode(b"", final=True)
        lines = self._split(text) if text else []
        self._cr = False
        if self._tail:
            lines.append("".join(self._tail))
            self._tail = []
        lines.append("")  # the body's end dispatches a pending event
        return self._lines(lines)

    def _lines(self, lines: list[str]) -> list[tuple[str | None, str]]:
        out: list[tuple[str | None, str]] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append((self._event, data[0] if len(data) == 1 else "\n".join(data)))
                    data = self._data = []
                self._event = None
            elif line[0] == "d" and line[:5] == "data:":
                data.append(line[6:] if line[5:6] == " " else line[5:])
            elif line[0] == ":":
                continue
            else:
                name, _, value = line.partition(":")
                if name == "event":
                    self._event = value[1:] if value[:1] == " " else value
                elif name == "data":  # "data" with no colon
                    data.append("")
        return out


class NDJSONDecoder(SSEDecoder):
    """One JSON document per line (Ollama's native API); blank lines are skipped."""

    __slots__ = ()

    def _lines(self, lines: list[str]) -> list[tuple[str | None, str]]:
        return [(None, line) for line in lines if line and not line.isspace()]


def iter_sse(lines: Iterable[str]) -> Iterator[tuple[str | None, str]]:
    """Decode Server-Sent Events from text lines into ``(event, data)`` pairs."""
    event: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line[0] == ":":
            continue
        name, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield event, "\n".join(data)


def iter_ndjson(lines: Iterable[str]) -> Iterator[tuple[str | None, str]]:
    for line in lines:
        if line.strip():
            yield None, line
