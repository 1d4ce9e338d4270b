"""Graph's MIME ``sendMail`` (``OutlookClient.send_mime``) and the lookup of its key header.

First against ``httpx.MockTransport`` (the request, the refusals, the one 401 retry), then against
the sandbox over real HTTP (the message kept in Sent Items, found by its PS_INTERNET_HEADERS
property).
"""

import base64
import email.policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from followup_pipeline.integrations.errors import PermanentError, TransientError
from followup_pipeline.integrations.outlook import (
    HEADER_KEY_PROPERTY,
    KEY_PROPERTY,
    OutlookClient,
)
from followup_pipeline.sandbox.config import SandboxConfig

DEFAULTS = SandboxConfig()
UNSUBSCRIBE = (
    "<https://academy.example.com/unsubscribe/" + "a1b2c3d4" * 12 + ">, "
    "<mailto:unsubscribe@academy.example.com?subject=unsubscribe>"
)
HEADERS = {"List-Unsubscribe": UNSUBSCRIBE, "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}
KEY = "lms:reminder:acme:quiz-7:learner-42:due_day"


class FakeGraph:
    """Answers token requests; records every other request, answering with ``answers`` first."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.tokens = 0
        self.requests: list[httpx.Request] = []
        self.answers = list(answers)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/oauth2/v2.0/token"):
            self.tokens += 1
            return httpx.Response(
                200,
                json={
                    "token_type": "Bearer",
                    "expires_in": 3599,
                    "access_token": f"tok{self.tokens}",
                },
            )
        self.requests.append(request)
        if self.answers:
            return self.answers.pop(0)
        return httpx.Response(202, headers={"request-id": "req-1"})


def mocked(graph: FakeGraph, sleeps: list[float]) -> OutlookClient:
    return OutlookClient(
        "http://login.test/login",
        "http://graph.test/graph",
        "tenant1",
        "client1",
        "VERY-SECRET",
        "sales@example.com",
        transport=httpx.MockTransport(graph),
        clock=lambda: 1000.0,
        sleep=sleeps.append,
    )


def send(client: OutlookClient, **overrides: Any) -> Any:
    args: dict[str, Any] = {
        "to": ["ada@example.com"],
        "subject": "Rappel : le quiz « Über » est dû",
        "html": "<p>Bonjour Ada</p>",
        "text": "Bonjour Ada",
        "key": KEY,
        "headers": HEADERS,
    }
    return client.send_mime(**{**args, **overrides})


def parsed(request: httpx.Request) -> EmailMessage:
    raw = base64.b64decode(request.content, validate=True)
    message = BytesParser(policy=email.policy.default).parsebytes(raw)
    assert isinstance(message, EmailMessage)
    return message


def test_send_mime_posts_the_whole_message_as_base64(sleeps: list[float]) -> None:
    graph = FakeGraph()
    receipt = send(mocked(graph, sleeps))
    (request,) = graph.requests
    assert request.method == "POST"
    assert request.url.path == "/graph/v1.0/users/sales@example.com/sendMail"
    assert request.headers["Content-Type"] == "text/plain"
    assert request.headers["Authorization"] == "Bearer tok1"
    mime = parsed(request)
    assert str(mime["To"]) == "ada@example.com"
    assert str(mime["Subject"]) == "Rappel : le quiz « Über » est dû"
    assert str(mime["List-Unsubscribe"]) == UNSUBSCRIBE
    assert str(mime["List-Unsubscribe-Post"]) == "List-Unsubscribe=One-Click"
    assert str(mime["X-Followup-Key"]) == KEY
    assert mime.get_content_type() == "multipart/alternative"
    parts = {part.get_content_type(): part.get_content() for part in mime.iter_parts()}
    assert parts == {"text/plain": "Bonjour Ada\r\n", "text/html": "<p>Bonjour Ada</p>\r\n"}
    # The URL and the key go as written (no RFC 2047 encoded-words), on CRLF lines.
    raw = base64.b64decode(request.content)
    assert f"\r\nList-Unsubscribe: {UNSUBSCRIBE}\r\n".encode() in raw
    assert f"\r\nX-Followup-Key: {KEY}\r\n".encode() in raw
    assert receipt.recipients == ["ada@example.com"]
    assert receipt.request_id == "req-1"


@pytest.mark.parametrize(
    ("headers", "key", "named"),
    [
        (
            {"List-Unsubscribe": "<https://x.example>\r\nBcc: all@example.com"},
            KEY,
            "List-Unsubscribe",
        ),
        ({"X-Note": "one\nline"}, KEY, "X-Note"),
        ({"X-Bad\r\nBcc": "x"}, KEY, "X-Bad"),
        ({"Bad Name": "x"}, KEY, "Bad Name"),
        ({"Bad:Name": "x"}, KEY, "Bad:Name"),
        ({"Subject": "x"}, KEY, "Subject"),
        ({"content-type": "text/html"}, KEY, "content-type"),
        ({"MIME-Version": "2.0"}, KEY, "MIME-Version"),
        ({"x-followup-key": "other"}, KEY, "x-followup-key"),
        ({"X-Coded": "=?utf-8?q?x?="}, KEY, "X-Coded"),
        (HEADERS, "key\r\nBcc: all@example.com", "X-Followup-Key"),
        (HEADERS, "clé", "X-Followup-Key"),
    ],
)
def test_send_mime_refuses_what_it_cannot_carry_before_any_request(
    headers: dict[str, str], key: str, named: str, sleeps: list[float]
) -> None:
    graph = FakeGraph()
    with pytest.raises(ValueError, match=named.replace("\r\n", ".*")):
        send(mocked(graph, sleeps), headers=headers, key=key)
    assert graph.requests == []
    assert graph.tokens == 0


def test_send_mime_sends_once_more_with_a_fresh_token_after_a_401(sleeps: list[float]) -> None:
    expired = httpx.Response(
        401, json={"error": {"code": "InvalidAuthenticationToken", "message": "expired"}}
    )
    graph = FakeGraph(httpx.Response(202), expired)
    client = mocked(graph, sleeps)
    send(client)
    send(client)
    assert graph.tokens == 2
    assert [r.headers["Authorization"] for r in graph.requests] == [
        "Bearer tok1",
        "Bearer tok1",
        "Bearer tok2",
    ]
    assert parsed(graph.requests[1]).as_bytes() == parsed(graph.requests[2]).as_bytes()


def test_send_mime_401_to_a_fresh_token_and_a_503_are_not_sent_again(sleeps: list[float]) -> None:
    denied = httpx.Response(401, json={"error": {"code": "Unauthorized", "message": "no"}})
    graph = FakeGraph(denied)
    with pytest.raises(PermanentError):
        send(mocked(graph, sleeps))
    assert len(graph.requests) == 1
    failed = httpx.Response(503, json={"error": {"code": "ServiceUnavailable", "message": "x"}})
    graph = FakeGraph(failed)
    with pytest.raises(TransientError):
        send(mocked(graph, sleeps))
    assert len(graph.requests) == 1
    assert sleeps == []


def test_find_sent_asks_each_property_in_turn(sleeps: list[float]) -> None:
    empty = httpx.Response(200, json={"value": []})
    found = httpx.Response(200, json={"value": [{"id": "m1", "isDraft": False}]})
    graph = FakeGraph(empty, found)
    client = mocked(graph, sleeps)
    assert client.find_sent("k'1", properties=(KEY_PROPERTY, HEADER_KEY_PROPERTY)) == "m1"
    filters = [parse_qs(r.url.query.decode())["$filter"][0] for r in graph.requests]
    assert filters == [
        f"singleValueExtendedProperties/Any(ep: ep/id eq '{prop}' and ep/value eq 'k''1')"
        for prop in (KEY_PROPERTY, HEADER_KEY_PROPERTY)
    ]
    graph = FakeGraph(found)
    assert mocked(graph, sleeps).find_sent("k1") == "m1"
    (request,) = graph.requests
    assert KEY_PROPERTY in parse_qs(request.url.query.decode())["$filter"][0]


# --- against the sandbox over real HTTP -----------------------------------------------------


def sandboxed(sandbox: str, sleeps: list[float]) -> OutlookClient:
    return OutlookClient(
        f"{sandbox}/login",
        f"{sandbox}/graph",
        DEFAULTS.graph_tenant_id,
        DEFAULTS.graph_client_id,
        DEFAULTS.graph_client_secret.get_secret_value(),
        "followup@example.com",
        sleep=sleeps.append,
    )


def outbox(sandbox: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{sandbox}/_sandbox/outbox", timeout=5)
    response.raise_for_status()
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def test_sandbox_keeps_a_mime_send_and_finds_it_by_its_header(
    sandbox: str, sleeps: list[float]
) -> None:
    client = sandboxed(sandbox, sleeps)
    try:
        receipt = send(client)
        by_header = client.find_sent(KEY, properties=(HEADER_KEY_PROPERTY,))
        by_legacy = client.find_sent(KEY)
        other_key = client.find_sent(KEY + ":other", properties=(HEADER_KEY_PROPERTY,))
        either = client.find_sent(KEY, properties=(KEY_PROPERTY, HEADER_KEY_PROPERTY))
        lower = HEADER_KEY_PROPERTY.replace("C000", "c000").replace(
            "X-Followup-Key", "x-FOLLOWUP-key"
        )
        by_other_case = client.find_sent(KEY, properties=(lower,))
    finally:
        client.close()
    assert receipt.request_id
    (entry,) = outbox(sandbox)
    assert by_header == entry["id"] == either
    assert by_legacy is None
    assert other_key is None
    # A PS_INTERNET_HEADERS name (and the set's GUID) match without regard to case.
    assert by_other_case == entry["id"]
    assert entry["mailbox"] == "followup@example.com"
    assert entry["save_to_sent_items"] is True
    message = entry["message"]
    assert message["subject"] == "Rappel : le quiz « Über » est dû"
    assert message["body"] == {"contentType": "HTML", "content": "<p>Bonjour Ada</p>\r\n"}
    assert message["textBody"] == "Bonjour Ada\r\n"
    assert message["toRecipients"] == [{"emailAddress": {"address": "ada@example.com"}}]
    assert message["internetMessageHeaders"] == [
        {"name": "List-Unsubscribe", "value": UNSUBSCRIBE},
        {"name": "List-Unsubscribe-Post", "value": "List-Unsubscribe=One-Click"},
        {"name": "X-Followup-Key", "value": KEY},
    ]
    assert {"id": HEADER_KEY_PROPERTY, "value": KEY} in message["singleValueExtendedProperties"]


def test_sandbox_json_sends_keep_their_exact_property(sandbox: str, sleeps: list[float]) -> None:
    client = sandboxed(sandbox, sleeps)
    try:
        client.send_mail(to=["team@example.com"], subject="Report", html="<p>x</p>", key=KEY)
        assert client.find_sent(KEY) is not None
        assert client.find_sent(KEY, properties=(HEADER_KEY_PROPERTY,)) is None
        assert client.find_sent(KEY, properties=(KEY_PROPERTY.replace("Name F", "Name f"),)) is None
    finally:
        client.close()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not base64!", "ErrorMimeContentInvalidBase64String"),
        (base64.b64encode(b"Subject: nobody\r\n\r\nhello\r\n"), "ErrorInvalidRecipients"),
    ],
)
def test_sandbox_refuses_a_bad_mime_send(
    sandbox: str, sleeps: list[float], body: bytes, code: str
) -> None:
    client = sandboxed(sandbox, sleeps)
    try:
        token = client.access_token()
    finally:
        client.close()
    response = httpx.post(
        f"{sandbox}/graph/v1.0/users/followup@example.com/sendMail",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "text/plain"},
        timeout=5,
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert outbox(sandbox) == []
