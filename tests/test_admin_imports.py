"""The chat admin's import page (django_llmchat.admin.imports): the "Import" link on the
chat list, ChatGPT's conversations.json or its .zip and a django-llmchat export read into
a chosen user's chats by the function the command calls, refused files as form errors
with nothing stored, and staff without the permission to add chats turned away."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from django_llmchat.admin.imports import NOTES_SHOWN
from django_llmchat.chats import lifecycle
from django_llmchat.models import Chat, Message
from django_llmchat.testing.invariants import assert_one_path
from tests import test_admin

pytestmark = pytest.mark.django_db
admin_client = test_admin.admin_client  # a superuser's client (the fixture)

CHATGPT = Path(__file__).parent / "fixtures" / "chatgpt" / "conversations.json"
IMPORT = reverse("admin:django_llmchat_chat_import")
CHANGELIST = reverse("admin:django_llmchat_chat_changelist")


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


def upload(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def post(client, user, data: bytes, name: str = "conversations.json", **extra):
    form = {"file": upload(name, data), "user": user.pk, "format": "auto", **extra}
    return client.post(IMPORT, form, follow=True)


def page_messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_the_chat_list_links_to_the_import_page_and_it_shows_the_form(admin_client):
    listing = admin_client.get(CHANGELIST).content.decode()
    assert f'<a href="{IMPORT}" class="llmchat-import-link">Import</a>' in listing
    page = admin_client.get(IMPORT)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'enctype="multipart/form-data"' in html
    assert 'type="file" name="file"' in html and 'name="format"' in html
    assert 'name="user"' in html and 'class="vForeignKeyRawIdAdminField"' in html
    assert "Import chats" in html and f'href="{CHANGELIST}">Chats</a>' in html


def test_chatgpts_conversations_json_becomes_the_users_chats(admin_client, alice):
    response = post(admin_client, alice, CHATGPT.read_bytes())

    assert response.redirect_chain == [(f"{CHANGELIST}?user={alice.pk}", 302)]
    sums, lighthouse = Chat.objects.filter(user=alice).order_by("id")
    assert (sums.title, lighthouse.title) == ("Sums", "Lighthouse")
    count = Message.objects.filter(chat__user=alice).count()
    said = page_messages(response)
    assert said[0] == f"Imported 2 chats ({count} messages) for alice."
    assert any(m.startswith("Note: ") and "dalle.text2im" in m for m in said[1:])
    # the same tree as the command makes: the edited prompt's branch active
    assert [m.content for m in sums.transcript()][-1] == "A cat."
    assert sums.messages.filter(on_path=False).count() == 3
    assert_one_path(sums)
    # the list after it is the user's chats; the admin's history records each one
    html = response.content.decode()
    assert "Sums" in html and "Lighthouse" in html
    assert sums.pk in response.context["cl"].result_list.values_list("pk", flat=True)
    from django.contrib.admin.models import LogEntry

    assert LogEntry.objects.filter(object_id=str(sums.pk)).get().get_change_message() == (
        "Imported from conversations.json."
    )


def test_the_zip_of_the_export_is_read_too(admin_client, alice):
    archive = zipped({"chat.html": b"<html></html>", "conversations.json": CHATGPT.read_bytes()})
    response = post(admin_client, alice, archive, name="chatgpt-export.zip")
    assert page_messages(response)[0].startswith("Imported 2 chats (")
    assert sorted(Chat.objects.filter(user=alice).values_list("title", flat=True)) == [
        "Lighthouse",
        "Sums",
    ]


def test_a_django_llmchat_export_is_read_into_another_user(admin_client, alice, django_user_model):
    chat = Chat.objects.create(user=alice, title="Paris", provider="openai", model_id="m")
    chat.add_message("user", "Weather in Paris?")
    chat.add_message("assistant", "Sunny.")
    bob = django_user_model.objects.create_user("bob")
    document = json.dumps(lifecycle.export_user(alice, files=True), default=str).encode()

    response = post(admin_client, bob, document, name="alice.json", format="llmchat")

    assert page_messages(response) == ["Imported 1 chat (2 messages) for bob."]
    (copy,) = Chat.objects.filter(user=bob)
    assert [m.content for m in copy.transcript()] == ["Weather in Paris?", "Sunny."]


@pytest.mark.parametrize(
    ("name", "data", "error"),
    [
        ("conversations.json", b"{not json", "Nothing was imported: the file is not JSON: "),
        ("notes.json", b'{"chats": []}', "Nothing was imported: not a known export"),
        ("export.zip", zipped({"user.json": b"{}"}), "the archive holds no conversations.json"),
        ("export.zip", b"PK\x03\x04 cut short", "the archive cannot be read"),
        ("deep.json", b"[" * 100_000, "nested too deeply"),
        ("odd.json", b'[{"mapping": {"a": 3}}]', "conversation 0: a value of an unexpected type"),
        ("latin1.json", '["café"]'.encode("latin-1"), "the file is not JSON"),
    ],
)
def test_a_file_that_cannot_be_imported_is_a_form_error_and_nothing_is_stored(
    admin_client, alice, name, data, error
):
    response = post(admin_client, alice, data, name=name)
    assert response.status_code == 200 and response.redirect_chain == []
    errors = response.context["form"].errors
    assert list(errors) == ["file"] and error in errors["file"][0]
    assert error in response.content.decode().replace("&#x27;", "'").replace("&quot;", '"')
    assert not Chat.objects.exists()


def test_a_chat_refused_half_way_leaves_none_of_the_file(admin_client, alice, django_user_model):
    """The command keeps the chats before a refused one; the page stores all or nothing."""
    for title in ("First", "Second"):
        chat = Chat.objects.create(user=alice, title=title, provider="openai", model_id="m")
        chat.add_message("user", "hi")
    document = lifecycle.export_user(alice, files=True)
    last = document["users"][0]["chats"][-1]
    document["users"][0]["feedback"] = [
        {"message": last["messages"][0]["id"], "rating": 5, "chat_id": last["id"]}
    ]
    bob = django_user_model.objects.create_user("bob")
    response = post(admin_client, bob, json.dumps(document, default=str).encode())
    assert "a rating must be one of" in response.context["form"].errors["file"][0]
    assert not Chat.objects.filter(user=bob).exists()


def test_the_form_needs_a_file_and_a_user_that_exists(admin_client, alice):
    response = admin_client.post(IMPORT, {"user": "", "format": "auto"})
    assert response.status_code == 200
    assert set(response.context["form"].errors) == {"file", "user"}
    form = {"file": upload("conversations.json", CHATGPT.read_bytes()), "user": 10**9}
    response = admin_client.post(IMPORT, {**form, "format": "auto"})
    assert list(response.context["form"].errors) == ["user"]
    response = post(admin_client, alice, b"", name="empty.json")
    assert "The submitted file is empty." in response.context["form"].errors["file"]
    assert not Chat.objects.exists()


def test_many_notes_are_cut_after_the_first_ones(admin_client, alice):
    conversation = json.loads(CHATGPT.read_text())[1]  # a call without a result: a note
    response = post(admin_client, alice, json.dumps([conversation] * (NOTES_SHOWN + 3)).encode())
    said = page_messages(response)
    assert said[0].startswith(f"Imported {NOTES_SHOWN + 3} chats")
    assert len([m for m in said if m.startswith("Note: ")]) == NOTES_SHOWN
    assert said[-1].startswith("And 3 more notes")


def test_staff_without_the_permission_to_add_chats_cannot_import(client, django_user_model):
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_chat"))
    client.force_login(viewer)
    assert "llmchat-import-link" not in client.get(CHANGELIST).content.decode()
    assert client.get(IMPORT).status_code == 403
    form = {"file": upload("conversations.json", CHATGPT.read_bytes()), "user": viewer.pk}
    assert client.post(IMPORT, form).status_code == 403
    assert not Chat.objects.exists()

    # the permission to add chats is what it takes
    viewer.user_permissions.add(Permission.objects.get(codename="add_chat"))
    viewer = django_user_model.objects.get(pk=viewer.pk)  # permissions cached no more
    client.force_login(viewer)
    form = {"file": upload("conversations.json", CHATGPT.read_bytes()), "user": viewer.pk}
    response = client.post(IMPORT, {**form, "format": "auto"})
    assert response.status_code == 302
    assert Chat.objects.filter(user=viewer).count() == 2


def test_a_user_who_is_not_staff_is_sent_to_the_login_page(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("plain", password="pw"))
    response = client.get(IMPORT)
    assert response.status_code == 302 and "login" in response["Location"]
