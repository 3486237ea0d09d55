"""``POST auth/token/`` is throttled per username and per client address, on by default;
the client address is ``REMOTE_ADDR`` unless ``REST_FRAMEWORK["NUM_PROXIES"]`` trusts
proxies."""

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from django_llmchat.conf import DEFAULTS

from .conftest import url

pytestmark = pytest.mark.django_db

ONLY_ADDRESS = {"TOKEN_THROTTLE_RATES": {"username": None, "address": "3/min"}}
ONLY_USERNAME = {"TOKEN_THROTTLE_RATES": {"username": "3/min", "address": None}}


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()  # throttles count in the default cache
    yield
    cache.clear()


def attempt(username="owner", password="nope", **meta):
    body = {"username": username, "password": password}
    return APIClient().post(url("token"), body, format="json", **meta)


def allowed(rate: str) -> int:
    return int(rate.split("/")[0])


def test_guessing_one_username_from_many_addresses_is_throttled_by_default(users):
    n = allowed(DEFAULTS["TOKEN_THROTTLE_RATES"]["username"])
    codes = {attempt(REMOTE_ADDR=f"10.0.{i // 250}.{i % 250}").status_code for i in range(n)}
    assert codes == {400}
    refused = attempt(password="pw", REMOTE_ADDR="10.9.9.9")  # the right password, too late
    assert refused.status_code == 429
    # another username is not throttled
    assert attempt("other", "pw", REMOTE_ADDR="10.9.9.9").status_code == 200


def test_many_usernames_from_one_address_are_throttled_by_default(users):
    n = allowed(DEFAULTS["TOKEN_THROTTLE_RATES"]["address"])
    codes = {attempt(f"user{i}", REMOTE_ADDR="10.1.1.1").status_code for i in range(n)}
    assert codes == {400}
    assert attempt("owner", "pw", REMOTE_ADDR="10.1.1.1").status_code == 429
    assert attempt("owner", "pw", REMOTE_ADDR="10.1.1.2").status_code == 200


def test_a_new_x_forwarded_for_each_time_does_not_escape_the_address_throttle(users, settings):
    settings.LLMCHAT = ONLY_ADDRESS
    codes = [
        attempt(
            f"user{i}", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}"
        ).status_code
        for i in range(4)
    ]
    assert codes == [400, 400, 400, 429]


def test_with_num_proxies_the_forwarded_address_is_the_client(users, settings):
    settings.LLMCHAT = ONLY_ADDRESS
    settings.REST_FRAMEWORK = {"NUM_PROXIES": 1}
    proxy = {"REMOTE_ADDR": "10.0.0.1"}
    # clients behind the one proxy are told apart by the address it forwards ...
    for i in range(4):
        assert attempt(**proxy, HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code == 400
    # ... the last one (what the trusted proxy saw), not what the client wrote before it
    codes = [
        attempt(**proxy, HTTP_X_FORWARDED_FOR=f"198.51.100.{i}, 192.0.2.7").status_code
        for i in range(4)
    ]
    assert codes == [400, 400, 400, 429]


def test_the_username_is_counted_case_folded_and_normalised(users, settings):
    settings.LLMCHAT = ONLY_USERNAME
    spellings = ["owner", "OWNER", " Owner ", "\uff4f\uff57\uff4e\uff45\uff52"]  # full width
    codes = [
        attempt(name, REMOTE_ADDR=f"10.2.0.{i}").status_code for i, name in enumerate(spellings)
    ]
    assert codes == [400, 400, 400, 429]


def test_failed_and_successful_logins_both_count(users, settings):
    settings.LLMCHAT = ONLY_USERNAME
    assert attempt(password="pw").status_code == 200
    assert attempt(password="nope").status_code == 400
    assert attempt(password="pw").status_code == 200
    assert attempt(password="pw").status_code == 429


def test_the_429_is_json_with_a_code_and_retry_after(users, settings):
    settings.LLMCHAT = {"TOKEN_THROTTLE_RATES": {"username": "1/hour"}}
    attempt()
    response = attempt()
    assert response.status_code == 429
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "throttled"
    assert "detail" in response.json()
    assert 3500 < int(response["Retry-After"]) <= 3600


def test_the_throttles_turn_off(users, settings):
    settings.LLMCHAT = {"TOKEN_THROTTLE_RATES": None}
    assert {attempt(REMOTE_ADDR="10.3.0.1").status_code for _ in range(30)} == {400}


def test_a_body_without_a_username_counts_per_address_only(users, settings):
    settings.LLMCHAT = {"TOKEN_THROTTLE_RATES": {"username": "1/min", "address": "3/min"}}
    client = APIClient()
    codes = [client.post(url("token"), {}, format="json").status_code for _ in range(4)]
    assert codes == [400, 400, 400, 429]


def test_the_llmchat_scope_ignores_x_forwarded_for_for_anonymous_clients(users, settings):
    settings.LLMCHAT = {"TOKEN_THROTTLE_RATES": None}
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"llmchat": "2/min"}}
    codes = [attempt(HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code for i in range(3)]
    assert codes == [400, 400, 429]


def test_the_schema_documents_the_token_429(clients):
    import json

    schema = json.loads(clients.anon.get(url("schema"), {"format": "json"}).content)
    text = schema["paths"]["/api/auth/token/"]["post"]["responses"]["429"]["description"]
    assert "TOKEN_THROTTLE_RATES" in text
