"""Graph client against ``httpx.MockTransport``: token cache, refresh on 401, sendMail errors."""

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from followup_pipeline.integrations.errors import PermanentError, TransientError
from followup_pipeline.integrations.outlook import GRAPH_SCOPE, OutlookClient, graph_scope

Handler = Callable[[httpx.Request], httpx.Response]


class FakeGraph:
    """Answers token and sendMail requests, counting them; ``send_answers`` go first."""

    def __init__(self, *send_answers: httpx.Response | Exception) -> None:
        self.tokens: list[dict[str, list[str]]] = []
        self.sends: list[httpx.Request] = []
        self.send_answers = list(send_answers)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/oauth2/v2.0/token"):
            self.tokens.append(parse_qs(request.content.decode()))
            number = len(self.tokens)
            return httpx.Response(
                200,
                json={"token_type": "Bearer", "expires_in": 3599, "access_token": f"tok{number}"},
            )
        self.sends.append(request)
        answer = self.send_answers.pop(0) if self.send_answers else httpx.Response(202)
        if isinstance(answer, Exception):
            raise answer
        return answer


def outlook(graph: FakeGraph, clock: Callable[[], float], sleeps: list[float]) -> OutlookClient:
    return OutlookClient(
        "http://login.test/login",
        "http://graph.test/graph",
        "tenant1",
        "client1",
        "VERY-SECRET",
        "sales@example.com",
        transport=httpx.MockTransport(graph),
        clock=clock,
        sleep=sleeps.append,
    )


def send(client: OutlookClient, **overrides: Any) -> Any:
    args: dict[str, Any] = {"to": ["a@example.com"], "subject": "Hi", "html": "<p>x</p>"}
    return client.send_mail(**{**args, **overrides})


def test_send_mail_posts_the_graph_message(sleeps: list[float]) -> None:
    graph = FakeGraph()
    receipt = send(outlook(graph, lambda: 1000.0, sleeps), headers={"X-Followup-Key": "r:1"})
    (token_form,) = graph.tokens
    assert token_form["grant_type"] == ["client_credentials"]
    assert token_form["scope"] == [GRAPH_SCOPE]
    (request,) = graph.sends
    assert request.url.path == "/graph/v1.0/users/sales@example.com/sendMail"
    assert request.headers["Authorization"] == "Bearer tok1"
    body = json.loads(request.content)
    assert body["saveToSentItems"] is True
    assert body["message"]["body"] == {"contentType": "HTML", "content": "<p>x</p>"}
    assert body["message"]["toRecipients"] == [{"emailAddress": {"address": "a@example.com"}}]
    assert body["message"]["internetMessageHeaders"] == [{"name": "X-Followup-Key", "value": "r:1"}]
    assert receipt.recipients == ["a@example.com"]


def test_token_is_cached_until_five_minutes_before_expiry(sleeps: list[float]) -> None:
    now = [1000.0]
    graph = FakeGraph()
    client = outlook(graph, lambda: now[0], sleeps)
    send(client)
    now[0] += 3599 - 301
    send(client)
    assert len(graph.tokens) == 1
    now[0] += 2
    send(client)
    assert len(graph.tokens) == 2
    assert graph.sends[-1].headers["Authorization"] == "Bearer tok2"


def test_send_mail_refreshes_a_rejected_cached_token_once(sleeps: list[float]) -> None:
    expired = httpx.Response(
        401, json={"error": {"code": "InvalidAuthenticationToken", "message": "x"}}
    )
    graph = FakeGraph(httpx.Response(202), expired)
    client = outlook(graph, lambda: 1000.0, sleeps)
    send(client)
    send(client)
    assert len(graph.tokens) == 2
    assert [r.headers["Authorization"] for r in graph.sends] == [
        "Bearer tok1",
        "Bearer tok1",
        "Bearer tok2",
    ]


def test_send_mail_401_with_a_fresh_token_is_permanent(sleeps: list[float]) -> None:
    denied = httpx.Response(401, json={"error": {"code": "Unauthorized", "message": "no"}})
    graph = FakeGraph(denied)
    with pytest.raises(PermanentError) as caught:
        send(outlook(graph, lambda: 1000.0, sleeps))
    assert len(graph.sends) == 1
    assert "Unauthorized" in str(caught.value)
    assert "VERY-SECRET" not in str(caught.value)


def test_send_mail_429_is_transient_and_not_retried(sleeps: list[float]) -> None:
    throttled = httpx.Response(
        429,
        headers={"Retry-After": "17"},
        json={"error": {"code": "ApplicationThrottled", "message": "slow down"}},
    )
    graph = FakeGraph(throttled)
    with pytest.raises(TransientError) as caught:
        send(outlook(graph, lambda: 1000.0, sleeps))
    assert caught.value.retry_after == 17.0
    assert len(graph.sends) == 1
    assert sleeps == []


def test_send_mail_timeout_is_ambiguous(sleeps: list[float]) -> None:
    graph = FakeGraph(httpx.ReadTimeout("slow"))
    with pytest.raises(TransientError) as caught:
        send(outlook(graph, lambda: 1000.0, sleeps))
    assert caught.value.ambiguous is True
    assert len(graph.sends) == 1


def test_token_error_is_permanent(sleeps: list[float]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid secret"}
        return httpx.Response(400, json=body)

    client = OutlookClient(
        "http://login.test",
        "http://graph.test",
        "t",
        "c",
        "VERY-SECRET",
        "s@example.com",
        transport=httpx.MockTransport(handler),
        sleep=sleeps.append,
    )
    with pytest.raises(PermanentError) as caught:
        send(client)
    assert "invalid_client" in str(caught.value)
    assert "VERY-SECRET" not in str(caught.value)


def test_send_mail_refuses_non_x_headers(sleeps: list[float]) -> None:
    with pytest.raises(ValueError, match="X-"):
        send(outlook(FakeGraph(), lambda: 1000.0, sleeps), headers={"Subject": "x"})


@pytest.mark.parametrize(
    ("url", "scope"),
    [
        ("https://graph.microsoft.com", "https://graph.microsoft.com/.default"),
        ("https://graph.microsoft.us/", "https://graph.microsoft.us/.default"),
        ("http://127.0.0.1:8765/graph", GRAPH_SCOPE),
    ],
)
def test_graph_scope_follows_the_cloud(url: str, scope: str) -> None:
    assert graph_scope(url) == scope
