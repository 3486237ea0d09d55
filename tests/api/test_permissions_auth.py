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


def test_cors_lets_the_spa_origin_in_with_a_token_and_last_event_id(owner, chat):
    client = APIClient()
    preflight = client.options(
        url("chat-events", pk=chat.pk),
        HTTP_ORIGIN="http://spa.example",
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="GET",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS="authorization, last-event-id",
    )
    assert preflight.status_code == 200  # not a 401: preflights carry no credentials
    assert preflight["Access-Control-Allow-Origin"] == "http://spa.example"
    allowed = preflight["Access-Control-Allow-Headers"].lower()
    assert "authorization" in allowed and "last-event-id" in allowed
    key = Token.objects.create(user=owner).key
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    response = client.get(url("chat-detail", pk=chat.pk), HTTP_ORIGIN="http://spa.example")
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "http://spa.example"
    other = client.get(url("chat-detail", pk=chat.pk), HTTP_ORIGIN="http://evil.example")
    assert "Access-Control-Allow-Origin" not in other


def test_swagger_ui_and_redoc_load_their_assets_from_this_site(client):
    from django.contrib.staticfiles import finders

    for name, asset in (("schema-docs", "swagger-ui-bundle.js"), ("schema-redoc", "redoc")):
        page = client.get(url(name))
        assert page.status_code == 200
        html = page.content.decode()
        assert "cdn.jsdelivr.net" not in html and "/static/drf_spectacular_sidecar/" in html
        assert asset in html
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert finders.find("drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js")


def test_an_unknown_path_is_a_json_404_even_with_a_session_and_no_csrf_token(owner):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    response = browser.delete("/api/chats/null,null/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
