"""A stored attachment's extension says its sniffed type, never the client's."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from django_llmchat.models import Attachment, Message
from django_llmchat.models.attachment import name_for_type

from .conftest import url

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.mark.parametrize(
    "name, data, declared, stored, mime",
    [
        ("evil.html", b"<script>alert(1)</script>", "text/plain", "evil.txt", "text/plain"),
        ("evil.svg", b"<svg onload=alert(1)>", "image/svg+xml", "evil.txt", "text/plain"),
        ("evil.js", b"alert(document.cookie)", "text/plain", "evil.txt", "text/plain"),
        ("cat.svg", PNG, "image/svg+xml", "cat.png", "image/png"),
        ("photo.html", PNG, "text/html", "photo.png", "image/png"),
        ("no-extension", b"plain words", "text/plain", "no-extension.txt", "text/plain"),
        ("notes.txt", b"plain words", "text/plain", "notes.txt", "text/plain"),
        (".htaccess", b"Options +ExecCGI", "text/plain", ".htaccess.txt", "text/plain"),
    ],
)
def test_the_stored_name_follows_the_sniffed_type(api, chat, name, data, declared, stored, mime):
    upload = SimpleUploadedFile(name, data, content_type=declared)
    response = api.post(
        url("chat-messages", pk=chat.pk),
        {"content": "see file", "attachments": [upload]},
        format="multipart",
    )
    assert response.status_code == 202, response.content
    attachment = Attachment.objects.get()
    assert (attachment.filename, attachment.mime_type) == (stored, mime)
    assert attachment.file.name.endswith("/" + stored)
    shown = response.json()["message"]["attachments"][0]
    assert shown["filename"] == stored and shown["mime_type"] == mime


def test_names_for_types():
    assert name_for_type("photo.jpeg", "image/jpeg") == "photo.jpeg"
    assert name_for_type("photo.png", "image/jpeg") == "photo.jpg"
    assert name_for_type("archive.tar.gz", "application/pdf") == "archive.tar.pdf"
    assert name_for_type("data", "application/x-unknown-thing") == "data.bin"
    assert name_for_type("report.txt", "text/csv") == "report.csv"


def test_python_code_storing_bytes_gets_the_same_rule(chat):
    message = Message.objects.create(chat=chat, role="user", content="x")
    att = Attachment.objects.create_from_bytes(
        message=message, data=b"<b>hi</b>", filename="page.html", mime_type="text/plain"
    )
    assert att.filename == "page.txt" and att.file.name.endswith("/page.txt")
    kept = Attachment.objects.create_from_bytes(
        message=message, data=b"<b>hi</b>", filename="page.html"
    )
    assert kept.filename == "page.html" and kept.mime_type == "text/html"
