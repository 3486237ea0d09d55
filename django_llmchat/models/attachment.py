from __future__ import annotations

import hashlib
import mimetypes
from typing import Any

from django.core.files.base import ContentFile
from django.db import models

# The extension a stored file gets for its type (others: ``mimetypes``, else ``.bin``).
EXTENSIONS = {
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/csv": ".csv",
    "application/json": ".json",
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "application/pdf": ".pdf",
    "audio/mpeg": ".mp3",
    "audio/ogg": ".ogg",
    "audio/flac": ".flac",
    "audio/wav": ".wav",
    "application/zip": ".zip",
}


def name_for_type(filename: str, mime_type: str) -> str:
    """``filename`` with an extension that says ``mime_type``: kept when it already does
    (``photo.jpeg`` for ``image/jpeg``), else replaced (``evil.html`` holding text becomes
    ``evil.txt``), so whatever serves the file by its extension serves the right type."""
    if mimetypes.guess_type(filename)[0] == mime_type:
        return filename
    stem = filename.rsplit(".", 1)[0] if "." in filename.lstrip(".") else filename
    extension = (
        EXTENSIONS.get(mime_type) or mimetypes.guess_extension(mime_type, strict=False) or ".bin"
    )
    return (stem or "attachment") + extension


def attachment_upload_to(instance: AbstractAttachment, filename: str) -> str:
    return f"llmchat/{instance.sha256[:2] or 'xx'}/{instance.sha256 or 'file'}/{filename}"


class AttachmentQuerySet(models.QuerySet):
    def create_from_bytes(
        self, *, message: Any, data: bytes, filename: str, mime_type: str | None = None
    ) -> AbstractAttachment:
        """Store ``data`` in the configured storage and record its size, type and hash; the
        name's extension follows the type (:func:`name_for_type`)."""
        mime = mime_type or mimetypes.guess_type(filename)[0] or "application/octet-stream"
        filename = name_for_type(filename, mime)
        att = self.model(
            message=message,
            filename=filename,
            mime_type=mime,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        att.file.save(filename, ContentFile(data), save=False)
        att.save()
        return att


class AbstractAttachment(models.Model):
    """A file sent with (or returned by) a message, in any Django storage."""

    file = models.FileField(upload_to=attachment_upload_to, max_length=500)
    filename = models.CharField(max_length=255)
    mime_type = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = AttachmentQuerySet.as_manager()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.filename

    def read(self) -> bytes:
        with self.file.open("rb") as fh:
            return fh.read()

    def to_dict(self) -> dict[str, Any]:
        return {
            "filename": self.filename,
            "mime_type": self.mime_type,
            "size": self.size,
            "sha256": self.sha256,
            "url": self.file.url if self.file else None,
        }


class Attachment(AbstractAttachment):
    message = models.ForeignKey(
        "django_llmchat.Message",
        on_delete=models.CASCADE,
        related_name="attachments",
        db_index=False,  # llmchat_attachment_msg_idx
    )

    class Meta(AbstractAttachment.Meta):
        db_table = "llmchat_attachment"
        ordering = ("id",)
        indexes = [models.Index(fields=["message"], name="llmchat_attachment_msg_idx")]
