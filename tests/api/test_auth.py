"""Authentication recipes for single-page apps: tokens (``Token`` and ``Bearer``), a token
endpoint, session + CSRF, and CORS for another origin."""

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from .conftest import url

pytestmark = pytest.mark.django_db


def test_bearer_and_token_keys_both_authenticate(owner, chat):
    key = Token.objects.create(user=owner).key
    for scheme in ("Bearer", "Token", "bearer"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"{scheme} {key}")
        response = client.get(url("chat-detail", pk=chat.pk))
        assert response.status_code == 200, (scheme, response.content)
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer not-a-key")
    assert wrong.get(url("chat-list")).status_code == 401
    basic = APIClient()
    basic.credentials(HTTP_AUTHORIZATION=f"Basic {key}")
    assert basic.get(url("chat-list")).status_code == 401


def test_the_token_endpoint_issues_one_token_per_user(owner):
    client = APIClient(enforce_csrf_checks=True)
    first = client.post(url("token"), {"username": "owner", "password": "pw"}, format="json")
    assert first.status_code == 200, first.content
    key = first.json()["token"]
    assert Token.objects.get(user=owner).key == key
    again = client.post(url("token"), {"username": "owner", "password": "pw"}, format="json")
    assert again.json()["token"] == key
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get(url("chat-list")).status_code == 200


def test_the_token_endpoint_refuses_bad_credentials_with_the_reason():
    client = APIClient()
    bad = client.post(url("token"), {"username": "owner", "password": "nope"}, format="json")
    assert bad.status_code == 400
    assert "non_field_errors" in bad.json()
    missing = client.post(url("token"), {"username": "owner"}, format="json")
    assert missing.status_code == 400 and "password" in missing.json()


def test_session_auth_needs_the_csrf_token_for_writes(owner, chat):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    assert browser.get(url("chat-detail", pk=chat.pk)).status_code == 200
    refused = browser.post(url("chat-list"), {"title": "x"}, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    browser.get(url("chat-list"))  # any page that sets the cookie, e.g. the app's shell
    from django.middleware.csrf import get_token
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    request.COOKIES = browser.cookies and {k: v.value for k, v in browser.cookies.items()}
    token = get_token(request)
    browser.cookies["csrftoken"] = token
    created = browser.post(
        url("chat-list"),
        {"title": "x"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert created.status_code == 201, created.content
