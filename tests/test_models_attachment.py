"""Attachments' rows (``models/attachment.py``): a stored file's name says its type, its
size and hash recorded, its path under its hash, read back as stored."""

from __future__ import annotations

import hashlib

import pytest

from django_llmchat.models import Attachment, Chat, Message
from django_llmchat.models.attachment import attachment_upload_to, name_for_type

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "filename, mime, expected",
    [
        ("photo.jpeg", "image/jpeg", "photo.jpeg"),  # already says its type: kept
        ("evil.html", "text/plain", "evil.txt"),
        ("notes", "text/markdown", "notes.md"),
        ("archive.tar.gz", "application/zip", "archive.tar.zip"),
        (".hidden", "application/json", ".hidden.json"),
        (".png", "image/png", ".png.png"),  # a hidden file: its name is its stem
        ("x.bin", "application/x-nothing-known", "x.bin"),
        ("clip.mp3", "audio/ogg", "clip.ogg"),
        ("", "image/gif", "attachment.gif"),
    ],
)
def test_name_for_type(filename, mime, expected):
    assert name_for_type(filename, mime) == expected


def test_the_upload_path_is_under_the_hash():
    assert attachment_upload_to(Attachment(sha256="abcdef"), "a.txt") == "llmchat/ab/abcdef/a.txt"
    assert attachment_upload_to(Attachment(), "a.txt") == "llmchat/xx/file/a.txt"


def test_create_from_bytes_stores_and_reads_back(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path)},
        },
    }
    message = Message.objects.create(chat=Chat.objects.create(), role="user", content="")
    data = b"hello, world"
    digest = hashlib.sha256(data).hexdigest()
    att = Attachment.objects.create_from_bytes(
        message=message, data=data, filename="page.html", mime_type="text/plain"
    )
    assert (att.filename, att.mime_type, att.size, att.sha256) == (
        "page.txt",
        "text/plain",
        len(data),
        digest,
    )
    assert att.file.name == f"llmchat/{digest[:2]}/{digest}/page.txt"
    assert Attachment.objects.get(pk=att.pk).read() == data
    assert att.to_dict()["url"].endswith("/page.txt") and str(att) == "page.txt"
    guessed = Attachment.objects.create_from_bytes(message=message, data=b"{}", filename="a.json")
    assert guessed.mime_type == "application/json"
    unknown = Attachment.objects.create_from_bytes(message=message, data=b"?", filename="blob")
    assert unknown.mime_type == "application/octet-stream" and unknown.filename == "blob.bin"
