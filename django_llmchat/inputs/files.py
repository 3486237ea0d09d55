"""Files an API user sends: read without trusting their size or type, their type sniffed
from their bytes, checked against the attachment settings (:mod:`django_llmchat.inputs`
lists every rule)."""

from __future__ import annotations

import codecs
import mimetypes
import os
from collections.abc import Iterable
from typing import Any

from ..conf import settings
from ..errors import InputError

# Leading bytes of the formats we can recognise.
SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"ID3", "audio/mpeg"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"PK\x03\x04", "application/zip"),
)
# Types we know how to recognise: a file claiming one of them must match.
SNIFFABLE = {mime for _, mime in SIGNATURES} | {"image/webp", "audio/wav", "text/plain"}
# Text types a client may name for content that decodes as text.
TEXT_TYPES = {
    "application/json",
    "application/xml",
    "application/x-yaml",
    "application/yaml",
    "application/javascript",
}
_CONTROL = set(range(0, 32)) - {9, 10, 12, 13, 27}


def _is_text(head: bytes) -> bool:
    if not head:
        return False
    if any(byte in _CONTROL for byte in head):
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return True


def sniff(head: bytes, declared: str | None = None) -> str | None:
    """The MIME type the first bytes show, or ``None`` when they show nothing known. Text
    keeps a declared ``text/*`` (or JSON, XML, YAML) type."""
    for signature, mime in SIGNATURES:
        if head.startswith(signature):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if _is_text(head):
        if declared and (declared.startswith("text/") or declared in TEXT_TYPES):
            return declared
        return "text/plain"
    return None


def _read(file: Any, limit: int | None) -> tuple[str, bytes, str, int | None]:
    """``(name, bytes, declared type, size)`` of an uploaded file or a ``(name, bytes[,
    type])`` tuple; a file whose size is over ``limit`` is not read, else at most one
    byte past it is."""
    if isinstance(file, tuple) and len(file) in (2, 3):
        name, data = file[0], file[1]
        declared = file[2] if len(file) == 3 else None
        if not isinstance(data, bytes | bytearray):
            raise TypeError("a file tuple holds (filename, bytes[, MIME type])")
        return str(name or ""), bytes(data), str(declared or ""), len(data)
    name = str(getattr(file, "name", "") or "")
    declared = str(getattr(file, "content_type", None) or "")
    size = getattr(file, "size", None)
    size = size if isinstance(size, int) else None
    if limit is not None and size is not None and size > limit:
        return name, b"", declared, size
    return name, file.read(limit + 1 if limit is not None else -1), declared, size


def check_attachment(file: Any, *, field: str = "attachments") -> tuple[str, bytes, str]:
    """One file: an uploaded file (``request.FILES``) or ``(filename, bytes[, declared
    type])``. It is not empty, at most ``LLMCHAT["MAX_ATTACHMENT_SIZE"]`` bytes, and of a
    type in ``LLMCHAT["ALLOWED_ATTACHMENT_TYPES"]``, that type sniffed from its bytes
    (a file claiming a type we recognise must hold it); returns ``(filename, bytes,
    type)``, the name's extension following the type (``evil.html`` holding text is
    ``evil.txt``), as it will be stored."""
    from ..models.attachment import name_for_type

    limit = settings.MAX_ATTACHMENT_SIZE
    name, data, declared, size = _read(file, limit)
    name = os.path.basename(name.replace("\\", "/")).replace("\x00", "")[:200] or "attachment"
    if limit is not None and size is not None and size > limit:
        raise InputError(field, f"{name}: too large ({size} bytes; at most {limit})")
    if limit is not None and len(data) > limit:
        raise InputError(field, f"{name}: too large (more than {limit} bytes)")
    if not data:
        raise InputError(field, f"{name}: the file is empty")
    declared = declared.split(";")[0].strip().lower()
    if not declared or declared == "application/octet-stream":
        declared = (mimetypes.guess_type(name)[0] or "").lower()
    mime = sniff(data[:8192], declared or None)
    if mime is None:
        if declared in SNIFFABLE or declared.startswith("text/"):
            raise InputError(field, f"{name}: the content is not {declared}")
        mime = declared or "application/octet-stream"
    allowed = [m.lower() for m in settings.ALLOWED_ATTACHMENT_TYPES or []]
    if mime not in allowed:
        raise InputError(
            field, f"{name}: type {mime} is not allowed (allowed: {', '.join(allowed)})"
        )
    return name_for_type(name, mime), data, mime


def check_attachments(
    files: Iterable[Any], *, field: str = "attachments"
) -> list[tuple[str, bytes, str]]:
    """At most ``LLMCHAT["MAX_ATTACHMENTS"]`` files, each passing
    :func:`check_attachment`."""
    files = list(files)
    limit = settings.MAX_ATTACHMENTS
    if limit is not None and len(files) > limit:
        raise InputError(field, f"too many files ({len(files)}; at most {limit})")
    return [check_attachment(f, field=field) for f in files]
