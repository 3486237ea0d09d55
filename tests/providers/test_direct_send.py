"""A provider's POST handed straight to its client's transport
(:meth:`~django_llmchat.providers.base_clients.ProviderClient.send_direct`): the request
the client would build, on the transport it would use, without the client's layers; and
the client doing the sending wherever it would do more (a proxy, a cookie, a hook)."""

from __future__ import annotations

import logging

import httpx
import pytest

from django_llmchat.errors import ProviderError, ProviderTimeoutError
from django_llmchat.providers import base
from django_llmchat.providers.base import close_clients
from django_llmchat.providers.openai_chat import OpenAICompatibleProvider
from django_llmchat.providers.types import ProviderMessage, ProviderRequest
from django_llmchat.testing import FakeProviderServer, Fault, Reply

KEY = "sk-direct-0123456789"
REQUEST = ProviderRequest(model_id="gpt-4.1-mini", messages=[ProviderMessage("user", "hi")])


@pytest.fixture(scope="module")
def server():
    with FakeProviderServer(
        default=Reply("Paris.", usage={"input_tokens": 5, "output_tokens": 2})
    ) as srv:
        yield srv


@pytest.fixture(autouse=True)
def fresh_clients(server):
    close_clients()
    server.reset()
    yield
    close_clients()


def loopback(server, **kwargs) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(api_key=KEY, base_url=server.base_url("openai"), **kwargs)


@pytest.fixture
def client_sends(monkeypatch) -> list[httpx.Request]:
    """The requests the client itself sent (``Client.send``): none on the direct path."""
    sent: list[httpx.Request] = []
    real = httpx.Client.send

    def counting(self, request, **kwargs):
        sent.append(request)
        return real(self, request, **kwargs)

    monkeypatch.setattr(httpx.Client, "send", counting)
    return sent


def recording() -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "id": "c",
                "model": "gpt-4.1-mini",
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"content": "Paris."}}
                ],
            },
        )

    return httpx.MockTransport(handler), seen


def test_a_whole_answer_and_a_stream_go_straight_to_the_transport(server, client_sends):
    provider = loopback(server)
    assert provider.complete(REQUEST).content == "Paris."
    streamed = list(provider.stream(REQUEST))
    assert streamed and client_sends == []
    [whole, stream] = server.requests
    assert whole.headers["authorization"] == f"Bearer {KEY}"
    assert whole.headers["user-agent"] == base.USER_AGENT
    assert whole.body["messages"] == [{"role": "user", "content": "hi"}]
    assert stream.stream and not whole.stream
    assert whole.peer == stream.peer  # one pooled keep-alive connection


def test_the_request_is_the_one_the_client_builds():
    """Method, URL, every header (the client's defaults: ``Accept``, ``Accept-Encoding``,
    ``Connection``, with the provider's over them; ``Host``, ``Content-Length``), body and
    timeouts: the same as ``client.post`` sends."""
    transport, seen = recording()
    provider = OpenAICompatibleProvider(
        api_key=KEY,
        base_url="https://vendor.example/v1",
        timeout={"connect": 2, "read": 30},
        options={"headers": {"X-Team": "blue"}},
        transport=transport,
    )
    provider.complete(REQUEST)
    url = provider.url(REQUEST, stream=False)
    body = provider.request_body(REQUEST, stream=False)
    provider.client.post(url, content=body, headers=provider.headers())
    direct, built = seen
    assert direct.method == built.method == "POST"
    assert direct.url == built.url
    assert sorted(direct.headers.multi_items()) == sorted(built.headers.multi_items())
    assert direct.headers["x-team"] == "blue"
    assert direct.content == built.content == body
    assert direct.extensions["timeout"] == built.extensions["timeout"]
    assert direct.extensions["timeout"] == {
        "connect": 2.0,
        "read": 30.0,
        "write": 30.0,
        "pool": 30.0,
    }


def test_a_read_timeout_is_the_clients(server):
    """The client's timeouts travel with the request: a slow answer times out."""
    server.script(Fault(first_byte_delay=1.0), Fault(first_byte_delay=1.0))
    provider = loopback(server, timeout={"connect": 2, "read": 0.2}, max_retries=0)
    with pytest.raises(ProviderTimeoutError, match="timed out waiting for"):
        provider.complete(REQUEST)
    with pytest.raises(ProviderTimeoutError):
        list(provider.stream(REQUEST))


def test_an_error_status_is_read_as_ever(server):
    server.script(Fault(status=429, body={"error": {"message": "slow down"}}, retry_after=0))
    provider = loopback(server, max_retries=0)
    with pytest.raises(ProviderError) as info:
        provider.complete(REQUEST)
    assert info.value.status == 429 and "slow down" in str(info.value)


def test_a_cookie_answered_is_kept_and_then_the_client_sends(client_sends):
    """An affinity cookie in an answer goes to the client's jar; from then on the client
    does the sending, so the cookie goes back (``test_base`` checks the jar's parse)."""
    answers = iter(
        [
            httpx.Response(
                200,
                headers={"set-cookie": "AWSALB=node-2; Path=/"},
                json={"choices": [{"message": {"content": "one"}, "finish_reason": "stop"}]},
            ),
            httpx.Response(
                200, json={"choices": [{"message": {"content": "two"}, "finish_reason": "stop"}]}
            ),
        ]
    )
    cookies: list[str | None] = []

    def handler(request):
        cookies.append(request.headers.get("cookie"))
        return next(answers)

    provider = OpenAICompatibleProvider(
        api_key=KEY, base_url="https://vendor.example/v1", transport=httpx.MockTransport(handler)
    )
    assert provider.complete(REQUEST).content == "one"
    assert client_sends == [] and dict(provider.client.cookies) == {"AWSALB": "node-2"}
    assert provider.complete(REQUEST).content == "two"
    assert cookies == [None, "AWSALB=node-2"] and len(client_sends) == 1


def test_an_event_hook_makes_the_client_send(client_sends):
    transport, seen = recording()
    provider = OpenAICompatibleProvider(
        api_key=KEY, base_url="https://vendor.example/v1", transport=transport
    )
    hooked: list[str] = []
    provider.client.event_hooks["request"].append(lambda request: hooked.append(request.method))
    provider.complete(REQUEST)
    list(provider.stream(REQUEST))
    assert hooked == ["POST", "POST"] and len(client_sends) == 2 and len(seen) == 2


def test_a_closed_client_refuses_as_httpx_does(server):
    provider = loopback(server, max_retries=0)
    provider.complete(REQUEST)
    provider.client.close()
    with pytest.raises(RuntimeError, match="client has been closed"):
        provider.complete(REQUEST)


def test_a_proxy_given_makes_the_client_send(server, client_sends):
    """A proxy option: the client's proxy transport carries the request (here a proxy
    nobody listens on, so it fails to connect: it was not sent straight to the server)."""
    provider = loopback(server, options={"proxy": "http://127.0.0.1:9"}, max_retries=0)
    with pytest.raises(ProviderError):
        provider.complete(REQUEST)
    assert len(client_sends) == 1 and server.requests == []


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY"])
def test_a_proxy_in_the_environment_makes_the_client_send(
    server, client_sends, monkeypatch, variable
):
    monkeypatch.setenv(variable, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # httpx's own rule still reaches the server
    provider = loopback(server)
    assert provider.complete(REQUEST).content == "Paris."
    assert len(client_sends) == 1 and len(server.requests) == 1


def test_each_request_is_logged_as_httpx_logs_it(server, caplog):
    provider = loopback(server)
    with caplog.at_level(logging.INFO, logger="httpx"):
        provider.complete(REQUEST)
    [record] = [r for r in caplog.records if r.name == "httpx"]
    assert record.getMessage() == (
        f'HTTP Request: POST {server.base_url("openai")}/chat/completions "HTTP/1.1 200 OK"'
    )
    assert KEY not in caplog.text


def test_the_clients_headers_changed_later_are_sent():
    """Headers set on the client after a request (``client.headers[...] = ...``) go with
    the next one, as with ``client.post``; a response read whole has its ``elapsed``."""
    import datetime

    transport, seen = recording()
    provider = OpenAICompatibleProvider(
        api_key=KEY, base_url="https://vendor.example/v1", transport=transport
    )
    provider.complete(REQUEST)
    provider.client.headers["X-Later"] = "1"
    provider.complete(REQUEST)
    assert "x-later" not in seen[0].headers and seen[1].headers["x-later"] == "1"
    response = provider.client.send_direct(
        provider.url(REQUEST, stream=False), b"{}", provider.headers()
    )
    assert isinstance(response.elapsed, datetime.timedelta)
    assert response.request.headers["x-later"] == "1"
