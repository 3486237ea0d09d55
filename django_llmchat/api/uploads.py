"""Checking uploaded attachments: size, and a type sniffed from the bytes rather than
taken from the client."""

from __future__ import annotations

import codecs
import mimetypes
import os

from rest_framework import serializers

from ..conf import settings

__all__ = ["check_upload", "sniff"]

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


def check_upload(upload) -> tuple[str, bytes, str]:
    """Validate one uploaded file; returns ``(filename, bytes, mime_type)``."""
    name = os.path.basename(getattr(upload, "name", "") or "") or "attachment"
    name = name.replace("\x00", "")[:200] or "attachment"
    limit = settings.MAX_ATTACHMENT_SIZE
    size = getattr(upload, "size", None)
    if limit is not None and size is not None and size > limit:
        raise serializers.ValidationError(f"{name}: too large ({size} bytes; at most {limit})")
    data = upload.read(limit + 1 if limit is not None else -1)
    if limit is not None and len(data) > limit:
        raise serializers.ValidationError(f"{name}: too large (more than {limit} bytes)")
    if not data:
        raise serializers.ValidationError(f"{name}: the file is empty")
    declared = (getattr(upload, "content_type", None) or "").split(";")[0].strip().lower()
    if not declared or declared == "application/octet-stream":
        declared = (mimetypes.guess_type(name)[0] or "").lower()
    mime = sniff(data[:8192], declared or None)
    if mime is None:
        if declared in SNIFFABLE or declared.startswith("text/"):
            raise serializers.ValidationError(f"{name}: the content is not {declared}")
        mime = declared or "application/octet-stream"
    allowed = [m.lower() for m in settings.ALLOWED_ATTACHMENT_TYPES or []]
    if mime not in allowed:
        raise serializers.ValidationError(
            f"{name}: type {mime} is not allowed (allowed: {', '.join(allowed)})"
        )
    return name, data, mime
