from __future__ import annotations

import hashlib
import mimetypes
from typing import Any

from django.core.files.base import ContentFile
from django.db import models


def attachment_upload_to(instance: AbstractAttachment, filename: str) -> str:
    return f"llmchat/{instance.sha256[:2] or 'xx'}/{instance.sha256 or 'file'}/{filename}"


class AttachmentQuerySet(models.QuerySet):
    def create_from_bytes(
        self, *, message: Any, data: bytes, filename: str, mime_type: str | None = None
    ) -> AbstractAttachment:
        """Store ``data`` in the configured storage and record its size, type and hash."""
        mime = mime_type or mimetypes.guess_type(filename)[0] or "application/octet-stream"
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

    @property
    def is_image(self) -> bool:
        return self.mime_type.startswith("image/")

    @property
    def is_pdf(self) -> bool:
        return self.mime_type == "application/pdf"

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
