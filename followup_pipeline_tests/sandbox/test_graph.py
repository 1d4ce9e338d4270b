"""The Microsoft Graph double: token, sendMail 202, body casing, mailboxes, errors, throttling."""

import asyncio
import base64
from email.message import EmailMessage
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


async def test_graph_send_mail_reads_property_names_in_any_case(sandbox: Sandbox) -> None:
    headers = {"Authorization": f"Bearer {await token(sandbox)}"}
    # Graph matches a body's property names without regard to case (PowerShell's examples
    # send `Message`, `SaveToSentItems`; its own example sends "saveToSentItems": "false").
    body = {
        "Message": {
            "Subject": "Morgenliste",
            "BODY": {"ContentType": "html", "Content": "<p>Guten Morgen</p>"},
            "ToRecipients": [{"EmailAddress": {"Address": "team@example.com"}}],
            "@odata.type": "#microsoft.graph.message",
        },
        "SaveToSentItems": "false",
    }
    response = await sandbox.client.post(SEND_URL, json=body, headers=headers)
    assert response.status_code == 202, response.text
    (sent,) = (await sandbox.client.get("/_sandbox/outbox")).json()["messages"]
    assert sent["message"]["subject"] == "Morgenliste"
    assert sent["message"]["toRecipients"] == [{"emailAddress": {"address": "team@example.com"}}]
    assert sent["save_to_sent_items"] is False


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({**MAIL, "saveToDrafts": True}, "The parameter 'saveToDrafts' in the request payload"),
        (
            {"message": {**MAIL["message"], "subjekt": "x"}},
            "The property 'subjekt' does not exist on type 'microsoft.graph.message'.",
        ),
        (
            {"message": {**MAIL["message"], "toRecipients": [{"address": "a@example.com"}]}},
            "The property 'address' does not exist on type 'microsoft.graph.recipient'.",
        ),
        ({**MAIL, "saveToSentItems": "maybe"}, "Cannot convert the literal 'maybe'"),
    ],
)
async def test_graph_send_mail_refuses_a_property_its_type_does_not_have(
    sandbox: Sandbox, body: dict[str, Any], message: str
) -> None:
    headers = {"Authorization": f"Bearer {await token(sandbox)}"}
    response = await sandbox.client.post(SEND_URL, json=body, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "RequestBodyRead"
    assert error["message"].startswith(message)
    assert (await sandbox.client.get("/_sandbox/outbox")).json()["messages"] == []


async def test_graph_unknown_mailbox_is_404_error_invalid_user(sandbox: Sandbox) -> None:
    headers = {"Authorization": f"Bearer {await token(sandbox)}"}
    user = "nobody@example.com"
    calls = [
        ("POST", f"/graph/v1.0/users/{user}/sendMail", MAIL),
        ("GET", f"/graph/v1.0/users/{user}/messages", None),
        ("GET", f"/graph/v1.0/users/{user}/mailFolders/SentItems/messages", None),
    ]
    for method, url, body in calls:
        response = await sandbox.client.request(method, url, json=body, headers=headers)
        assert response.status_code == 404, url
        error = response.json()["error"]
        assert error["code"] == "ErrorInvalidUser"
        assert error["message"] == f"The requested user '{user}' is invalid."
    assert (await sandbox.client.get("/_sandbox/outbox")).json()["messages"] == []
    # Without a valid token the 401 comes first, as ever.
    anonymous = await sandbox.client.post(f"/graph/v1.0/users/{user}/sendMail", json=MAIL)
    assert anonymous.status_code == 401


async def test_graph_mailboxes_added_by_the_control_api_send_by_upn_or_id(
    sandbox: Sandbox,
) -> None:
    headers = {"Authorization": f"Bearer {await token(sandbox)}"}
    listed = (await sandbox.client.get("/_sandbox/mailboxes")).json()["mailboxes"]
    assert [m["address"] for m in listed] == ["followup@example.com"]  # FOLLOWUP_GRAPH_SENDER's
    added = await sandbox.client.post("/_sandbox/mailboxes", json={"address": "Ops@Example.com"})
    assert added.status_code == 201
    ops = next(m for m in added.json()["mailboxes"] if m["address"] == "Ops@Example.com")
    for user in ("ops@example.com", ops["id"]):  # a UPN in any case, or the object id
        url = f"/graph/v1.0/users/{user}/sendMail"
        assert (await sandbox.client.post(url, json=MAIL, headers=headers)).status_code == 202
    outbox = (await sandbox.client.get("/_sandbox/outbox")).json()["messages"]
    assert [m["mailbox"] for m in outbox] == ["Ops@Example.com", "Ops@Example.com"]
    removed = await sandbox.client.delete("/_sandbox/mailboxes/ops@example.com")
    assert removed.status_code == 200
    gone = await sandbox.client.post(
        "/graph/v1.0/users/ops@example.com/sendMail", json=MAIL, headers=headers
    )
    assert gone.status_code == 404
    bad = await sandbox.client.post("/_sandbox/mailboxes", json={"address": "no-at-sign"})
    assert bad.status_code == 400
    await sandbox.client.post("/_sandbox/mailboxes", json={"mailboxes": ["x@example.com"]})
    await sandbox.client.post("/_sandbox/reset", json={})
    after = (await sandbox.client.get("/_sandbox/mailboxes")).json()["mailboxes"]
    assert [m["address"] for m in after] == ["followup@example.com"]  # as configured


async def test_graph_configured_mailboxes_are_the_tenants(make_sandbox: SandboxFactory) -> None:
    async with make_sandbox(graph_mailboxes=["reports@example.com"]) as sandbox:
        headers = {"Authorization": f"Bearer {await token(sandbox)}"}
        url = "/graph/v1.0/users/{}/sendMail"
        ok = await sandbox.client.post(
            url.format("reports@example.com"), json=MAIL, headers=headers
        )
        other = await sandbox.client.post(
            url.format("followup@example.com"), json=MAIL, headers=headers
        )
    assert (ok.status_code, other.status_code) == (202, 404)


async def test_graph_draft_patch_reads_property_names_in_any_case(sandbox: Sandbox) -> None:
    headers = {"Authorization": f"Bearer {await token(sandbox)}"}
    mime = EmailMessage()
    mime["To"], mime["Subject"] = "team@example.com", "Entwurf"
    mime.set_content("Hallo")
    mime.add_alternative("<p>Hallo</p>", subtype="html")
    drafts = "/graph/v1.0/users/followup@example.com/messages"
    created = await sandbox.client.post(
        drafts,
        content=base64.b64encode(mime.as_bytes()),
        headers={**headers, "Content-Type": "text/plain"},
    )
    draft_id = created.json()["id"]
    prop = "String {66f5a359-4659-4830-9070-00047ec6ac6e} Name FollowupKey"
    patch = {"Subject": "Angebot", "SingleValueExtendedProperties": [{"Id": prop, "Value": "k1"}]}
    patched = await sandbox.client.patch(f"{drafts}/{draft_id}", json=patch, headers=headers)
    assert patched.status_code == 200
    unknown = await sandbox.client.patch(
        f"{drafts}/{draft_id}", json={"colour": "blue"}, headers=headers
    )
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (400, "RequestBodyRead")
    sent = await sandbox.client.post(f"{drafts}/{draft_id}/send", headers=headers)
    assert sent.status_code == 202
    query = f"singleValueExtendedProperties/Any(ep: ep/id eq '{prop}' and ep/value eq 'k1')"
    found = await sandbox.client.get(drafts, params={"$filter": query}, headers=headers)
    assert [m["subject"] for m in found.json()["value"]] == ["Angebot"]
