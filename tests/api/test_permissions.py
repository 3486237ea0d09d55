"""Access, authentication and throttling of the API (``api/permissions.py``): the scoped
throttles, the runs throttle counting runs only, session authentication with CSRF, a
project's own authentication classes."""

import pytest
from django.core.cache import cache
from django.test import Client

from .conftest import url

pytestmark = pytest.mark.django_db


def test_scoped_throttle(api, chat, settings):
    cache.clear()
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"llmchat": "3/min"}}
    codes = [api.get(url("chat-detail", pk=chat.pk)).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    cache.clear()


def test_runs_throttle_only_counts_runs(api, chat, settings):
    cache.clear()
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"llmchat_runs": "1/min"}}
    assert (
        api.post(url("chat-messages", pk=chat.pk), {"content": "a"}, format="json").status_code
        == 202
    )
    assert (
        api.post(url("chat-messages", pk=chat.pk), {"content": "a"}, format="json").status_code
        == 429
    )
    assert api.get(url("chat-messages", pk=chat.pk)).status_code == 200
    cache.clear()


def test_session_auth_enforces_csrf(owner, chat):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.get(url("chat-detail", pk=chat.pk)).status_code == 200
    refused = client.patch(
        url("chat-detail", pk=chat.pk), {"title": "x"}, content_type="application/json"
    )
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    client.get("/admin/login/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    ok = client.patch(
        url("chat-detail", pk=chat.pk),
        {"title": "x"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert ok.status_code == 200


def test_project_authentication_classes_win(owner, chat, settings):
    settings.REST_FRAMEWORK = {
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"]
    }
    import base64

    basic = "Basic " + base64.b64encode(b"owner:pw").decode()
    response = Client().get(url("chat-detail", pk=chat.pk), HTTP_AUTHORIZATION=basic)
    assert response.status_code == 200
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=owner).key
    response = Client().get(url("chat-detail", pk=chat.pk), HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 401
