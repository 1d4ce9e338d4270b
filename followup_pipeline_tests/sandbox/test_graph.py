"""The Microsoft Graph double: client-credentials token, sendMail 202, errors, throttling."""

import asyncio
from typing import Any

import pytest

from followup_pipeline_tests.sandbox.conftest import Sandbox, SandboxFactory

pytestmark = pytest.mark.anyio
TOKEN_URL = "/login/sandbox-tenant/oauth2/v2.0/token"
SEND_URL = "/graph/v1.0/users/followup@example.com/sendMail"
FORM = {
    "client_id": "sandbox-client",
    "client_secret": "sandbox-client-secret",
    "scope": "https://graph.microsoft.com/.default",
    "grant_type": "client_credentials",
}
MAIL: dict[str, Any] = {
    "message": {
        "subject": "Morgenliste",
        "body": {"contentType": "HTML", "content": "<p>Guten Morgen</p>"},
        "toRecipients": [{"emailAddress": {"address": "team@example.com"}}],
        "internetMessageHeaders": [{"name": "X-Followup-Key", "value": "report:morning:1"}],
    },
    "saveToSentItems": True,
}


async def token(sandbox: Sandbox) -> str:
    """A fresh access token."""
    response = await sandbox.client.post(TOKEN_URL, data=FORM)
    value: str = response.json()["access_token"]
    return value


async def test_graph_token_answers_bearer_with_expiry(make_sandbox: SandboxFactory) -> None:
    async with make_sandbox(graph_token_expires_in=120) as sandbox:
        response = await sandbox.client.post(TOKEN_URL, data=FORM)
        assert response.status_code == 200
        body = response.json()
        assert (body["token_type"], body["expires_in"]) == ("Bearer", 120)
        assert body["access_token"]


async def test_graph_token_wrong_secret_is_invalid_client(sandbox: Sandbox) -> None:
    response = await sandbox.client.post(TOKEN_URL, data={**FORM, "client_secret": "nope"})
    assert response.status_code == 401  # invalid_client is a 401 at the identity platform
    body = response.json()
    assert body["error"] == "invalid_client"
    assert body["error_description"].startswith("AADSTS7000215")
    assert f"Trace ID: {body['trace_id']}" in body["error_description"]
    assert body["error_codes"] == [7000215]
    assert body["error_uri"].endswith("code=7000215")


async def test_graph_send_mail_accepts_202_and_records_outbox(sandbox: Sandbox) -> None:
    headers = {"Authorization": f"Bearer {await token(sandbox)}"}
    response = await sandbox.client.post(SEND_URL, json=MAIL, headers=headers)
    assert response.status_code == 202
    assert response.content == b""
    assert response.headers["request-id"]
    outbox = (await sandbox.client.get("/_sandbox/outbox")).json()["messages"]
    assert outbox[0]["mailbox"] == "followup@example.com"
    assert outbox[0]["message"]["subject"] == "Morgenliste"


async def test_graph_send_mail_refuses_missing_or_expired_token(sandbox: Sandbox) -> None:
    missing = await sandbox.client.post(SEND_URL, json=MAIL)
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "InvalidAuthenticationToken"
    value = await token(sandbox)
    sandbox.state.tokens[value] = 0.0  # expired long ago
    expired = await sandbox.client.post(
        SEND_URL, json=MAIL, headers={"Authorization": f"Bearer {value}"}
    )
    assert expired.status_code == 401
    assert expired.json()["error"]["code"] == "InvalidAuthenticationToken"


@pytest.mark.parametrize(
    "message",
    [
        {
            "subject": "x",
            "body": {"contentType": "Markdown", "content": "x"},
            "toRecipients": [{"emailAddress": {"address": "a@example.com"}}],
        },
        {"subject": "x", "body": {"contentType": "Text", "content": "x"}, "toRecipients": []},
        {"subject": 5, "toRecipients": [{"emailAddress": {"address": "a@example.com"}}]},
    ],
)
async def test_graph_send_mail_validates_the_message(
    sandbox: Sandbox, message: dict[str, Any]
) -> None:
    headers = {"Authorization": f"Bearer {await token(sandbox)}"}
    response = await sandbox.client.post(SEND_URL, json={"message": message}, headers=headers)
    assert response.status_code == 400
    assert set(response.json()["error"]) >= {"code", "message"}
    assert (await sandbox.client.get("/_sandbox/outbox")).json()["messages"] == []


async def test_graph_send_mail_throttles_with_retry_after(make_sandbox: SandboxFactory) -> None:
    async with make_sandbox(graph_messages_per_window=2) as sandbox:
        headers = {"Authorization": f"Bearer {await token(sandbox)}"}
        statuses = [
            (await sandbox.client.post(SEND_URL, json=MAIL, headers=headers)).status_code
            for _ in range(3)
        ]
        assert statuses == [202, 202, 429]
        limited = await sandbox.client.post(SEND_URL, json=MAIL, headers=headers)
        assert int(limited.headers["Retry-After"]) >= 1
        assert limited.json()["error"]["code"] == "ApplicationThrottled"


async def test_graph_send_mail_allows_four_concurrent_sends_per_mailbox(
    make_sandbox: SandboxFactory,
) -> None:
    async with make_sandbox(graph_send_latency_s=0.3) as sandbox:
        headers = {"Authorization": f"Bearer {await token(sandbox)}"}
        sends = [sandbox.client.post(SEND_URL, json=MAIL, headers=headers) for _ in range(5)]
        answers = await asyncio.gather(*sends)
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [202, 202, 202, 202, 429]
    [limited] = [a for a in answers if a.status_code == 429]
    assert int(limited.headers["Retry-After"]) >= 1
    assert "MailboxConcurrency" in limited.json()["error"]["message"]
