"""The site form's and the payment provider's senders: their headers and bodies on the wire, and
their retries on the sandbox's clock (checked with the ingress's own verifiers)."""

import asyncio
import itertools
import json
import os
import random
import shlex
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from followup_pipeline.ingress.signatures import verify_standard, verify_stripe
from followup_pipeline.sandbox import SandboxConfig, create_app, env_lines, persist, sandbox_state
from followup_pipeline.sandbox.intake import intake_step
from followup_pipeline.sandbox.senders import STRIPE_SCHEDULE_S, SVIX_SCHEDULE_S
from followup_pipeline.sandbox.server import masked
from followup_pipeline.settings import load_settings
from followup_pipeline_tests.sandbox.conftest import Sandbox, SandboxFactory
from followup_pipeline_tests.sandbox.test_webhooks import mock
from followup_pipeline_tests.support import served

pytestmark = pytest.mark.anyio
CONFIG = SandboxConfig()
FORM = {"name": "Lena Vogt", "email": "lena.vogt@example.com", "message": "Rückruf, bitte"}
PAYMENT = {"email": "lena.vogt@example.com", "name": "Lena Vogt", "amount_total": 12900}
#: Each source: its control path, its retry schedule, and how the ingress verifies it.
SOURCES = {
    "site-form": ("forms", FORM, SVIX_SCHEDULE_S),
    "payment": ("payments", PAYMENT, STRIPE_SCHEDULE_S),
}


def verified(request: httpx.Request) -> str:
    """Check a request as the ingress does (at the moment it was signed); its message id."""
    headers = {k.lower(): v for k, v in request.headers.items()}
    if request.url.path.endswith("/site-form"):
        secret = CONFIG.site_form_secret.get_secret_value()
        now = int(_signed_at(request))
        return verify_standard(headers, request.content, [secret], now=now).webhook_id
    secret = CONFIG.payment_secret.get_secret_value()
    verify_stripe(headers, request.content, [secret], now=int(_signed_at(request)))
    return str(json.loads(request.content)["id"])


def _signed_at(request: httpx.Request) -> str:
    """The timestamp a request was signed with (either sender's header)."""
    stripe = request.headers.get("stripe-signature", "")
    return request.headers.get("webhook-timestamp") or stripe.split(",")[0].removeprefix("t=")


async def _advance(sandbox: Sandbox, seconds: float) -> list[dict[str, Any]]:
    """Move the sandbox's clock on, then send what is due (what its job does every tick)."""
    await sandbox.client.post("/_sandbox/clock", json={"advance_seconds": seconds})
    deliveries: list[dict[str, Any]] = (
        await sandbox.client.post("/_sandbox/senders/flush")
    ).json()["deliveries"]
    return deliveries


@pytest.mark.parametrize("source", list(SOURCES))
async def test_senders_retry_after_a_503_and_stop_after_a_200(
    make_sandbox: SandboxFactory, source: str
) -> None:
    path, request, schedule = SOURCES[source]
    seen: list[httpx.Request] = []
    url = "http://ingress/webhooks/espocrm"
    async with make_sandbox(mock([503, 200], seen), webhook_url=url) as sandbox:
        sent = (await sandbox.client.post(f"/_sandbox/{path}", json=request)).json()
        assert [(d["status"], d["outcome"]) for d in sent["deliveries"]] == [(503, "retry")]
        assert await _advance(sandbox, schedule[1] - 1) == []  # not due yet
        retried = await _advance(sandbox, 1)
        assert [(d["status"], d["outcome"], d["attempt"]) for d in retried] == [(200, "success", 2)]
        assert await _advance(sandbox, 3 * 86400) == []  # delivered: no more attempts
        listed = (await sandbox.client.get(f"/_sandbox/{path}")).json()
    assert [m["outcome"] for m in listed["messages"]] == ["delivered"]
    assert len(listed["deliveries"]) == 2
    assert [str(r.url) for r in seen] == [f"http://ingress/webhooks/{source}"] * 2
    # The same message and bytes, signed afresh as time went on.
    assert {verified(r) for r in seen} == {sent["id"]}
    assert seen[0].content == seen[1].content
    assert seen[0].headers["content-type"] == "application/json"


@pytest.mark.parametrize("source", list(SOURCES))
async def test_senders_follow_their_schedule_until_it_is_spent(
    make_sandbox: SandboxFactory, source: str
) -> None:
    path, request, schedule = SOURCES[source]
    seen: list[httpx.Request] = []
    # A refused connection and a timeout are failures too, retried as the rest.
    failures = [0, -1] + [500] * (len(schedule) + 2)
    async with make_sandbox(mock(failures, seen), webhook_url="http://i/webhooks/x") as sandbox:
        sent = (await sandbox.client.post(f"/_sandbox/{path}", json=request)).json()
        for wait in schedule[1:]:
            assert len(await _advance(sandbox, wait)) == 1
        assert await _advance(sandbox, 7 * 86400) == []
        [message] = (await sandbox.client.get(f"/_sandbox/{path}")).json()["messages"]
    assert (message["attempts"], message["outcome"], message["due"]) == (
        len(schedule),
        "failed",
        None,
    )
    stamps = [int(_signed_at(r)) for r in seen]
    assert [b - a for a, b in itertools.pairwise(stamps)] == [
        pytest.approx(wait, abs=2) for wait in schedule[1:]
    ]
    assert {verified(r) for r in seen} == {sent["id"]}
    assert sum(schedule) <= 3 * 86400  # Stripe: within three days; Svix: about 28 hours


async def test_senders_redeliver_the_same_message_signed_afresh(
    make_sandbox: SandboxFactory,
) -> None:
    seen: list[httpx.Request] = []
    async with make_sandbox(mock([], seen), webhook_url="http://i/webhooks/espocrm") as sandbox:
        form = (await sandbox.client.post("/_sandbox/forms", json=FORM)).json()
        await sandbox.client.post("/_sandbox/clock", json={"advance_seconds": 6 * 86400})
        again = await sandbox.client.post(f"/_sandbox/forms/{form['id']}/redeliver")
        wrong = await sandbox.client.post(f"/_sandbox/payments/{form['id']}/redeliver")
        none = await sandbox.client.post("/_sandbox/forms/msg_nothing/redeliver")
    assert [(d["status"], d["redelivery"]) for d in again.json()["deliveries"]] == [(200, True)]
    assert (wrong.status_code, none.status_code) == (404, 404)
    first, second = seen
    assert (verified(first), verified(second)) == (form["id"], form["id"])
    assert first.content == second.content
    gap = int(second.headers["webhook-timestamp"]) - int(first.headers["webhook-timestamp"])
    assert gap == pytest.approx(6 * 86400, abs=2)
    body = json.loads(first.content)
    assert (body["type"], body["data"]["email"], body["data"]["company"]) == (
        "form.submitted",
        "lena.vogt@example.com",
        None,
    )
    assert set(body["data"]) == {"name", "email", "company", "phone", "message", "consent", "page"}
    assert "Rückruf".encode() in first.content  # UTF-8, as sent


async def test_senders_send_stripes_event_shapes(make_sandbox: SandboxFactory) -> None:
    seen: list[httpx.Request] = []
    async with make_sandbox(mock([], seen), webhook_url="http://i/webhooks/espocrm") as sandbox:
        await sandbox.client.post("/_sandbox/payments", json={**PAYMENT, "phone": "+49 30 1"})
        await sandbox.client.post(
            "/_sandbox/payments", json={"type": "payment_intent.created", "amount_total": 500}
        )
        given = {"id": "in_1", "object": "invoice", "amount_due": 100}
        await sandbox.client.post(
            "/_sandbox/payments", json={"type": "invoice.paid", "object": given}
        )
        unknown = await sandbox.client.post("/_sandbox/payments", json={"type": "invoice.paid"})
        invalid = await sandbox.client.post("/_sandbox/payments", json={"currency": "EURO"})
    assert (unknown.status_code, invalid.status_code) == (400, 422)
    session, intent, invoice = (json.loads(r.content) for r in seen)
    assert {k: session[k] for k in ("object", "livemode", "type", "api_version")} == {
        "object": "event",
        "livemode": False,
        "type": "checkout.session.completed",
        "api_version": "2024-06-20",
    }
    assert session["id"].startswith("evt_")
    checkout = session["data"]["object"]
    assert checkout["id"].startswith("cs_")
    assert (checkout["object"], checkout["amount_total"], checkout["currency"]) == (
        "checkout.session",
        12900,
        "eur",
    )
    assert checkout["payment_status"] == "paid"
    assert checkout["customer_details"] == {
        "email": "lena.vogt@example.com",
        "name": "Lena Vogt",
        "phone": "+49 30 1",
    }
    assert checkout["metadata"] == {}
    assert (intent["data"]["object"]["object"], intent["data"]["object"]["status"]) == (
        "payment_intent",
        "requires_payment_method",
    )
    assert invoice["data"]["object"] == given
    assert seen[0].content.startswith(b'{\n  "id": "evt_')  # pretty-printed, as Stripe sends
    assert seen[0].headers["user-agent"].startswith("Stripe/")


async def test_senders_wait_for_a_target(make_sandbox: SandboxFactory) -> None:
    seen: list[httpx.Request] = []
    async with make_sandbox(mock([], seen)) as sandbox:
        form = (await sandbox.client.post("/_sandbox/forms", json=FORM)).json()
        assert (form["deliveries"], form["outcome"]) == ([], "pending")
        target = {"url": "http://late/webhooks/espocrm"}
        await sandbox.client.post("/_sandbox/webhooks", json=target)
        sent = (await sandbox.client.post("/_sandbox/senders/flush")).json()["deliveries"]
    assert [d["outcome"] for d in sent] == ["success"]
    assert str(seen[0].url) == "http://late/webhooks/site-form"


def payment_receiver(received: list[bytes], statuses: list[int]) -> Starlette:
    """A tiny ingress at ``/webhooks/payment`` answering the given statuses in turn, then 200."""

    async def hook(request: Request) -> Response:
        received.append(await request.body())
        return Response(status_code=statuses.pop(0) if statuses else 200)

    return Starlette(routes=[Route("/webhooks/payment", hook, methods=["POST"])])


async def test_senders_job_retries_on_the_sandbox_clock(make_sandbox: SandboxFactory) -> None:
    received: list[bytes] = []
    with served(payment_receiver(received, [503])) as url:
        target = f"{url}/webhooks/espocrm"
        async with make_sandbox(webhook_url=target, sender_tick_s=0.05) as sandbox:
            with served(sandbox.app) as base:
                async with httpx.AsyncClient(base_url=base) as client:
                    first = (await client.post("/_sandbox/payments", json=PAYMENT)).json()
                    assert [d["status"] for d in first["deliveries"]] == [503]
                    await asyncio.sleep(0.3)  # the job's ticks: nothing due for a minute
                    assert len(received) == 1
                    await client.post("/_sandbox/clock", json={"advance_seconds": 60})
                    for _ in range(250):  # up to 5 s: two busy cores can lag the ticks
                        history = (await client.get("/_sandbox/payments")).json()["deliveries"]
                        if len(history) == 2:
                            break
                        await asyncio.sleep(0.02)
    assert [entry["status"] for entry in history] == [503, 200]
    assert received[0] == received[1]


def test_senders_messages_are_kept_across_a_restart(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    state = sandbox_state(create_app(SandboxConfig(state_file=state_file)))
    rng = random.Random(3)
    lines = [intake_step(state, rng) for _ in range(200)]
    kinds = Counter(line.split(" ")[0] for line in lines)
    assert kinds["site"] > 30  # forms …
    assert kinds["payment"] > 30  # … and payments …
    assert sum("sent again" in line for line in lines) > 10  # … some of them twice
    emails = Counter(
        json.loads(m.body).get("data", {}).get("email")
        or json.loads(m.body)["data"]["object"].get("customer_details", {}).get("email")
        for m in state.senders.messages.values()
    )
    assert max(emails.values()) > 1  # the same e-mail, a form and a payment
    persist.save(state, state_file)
    os.close(state.lock_fd or -1)
    kept = sandbox_state(create_app(SandboxConfig(state_file=state_file))).senders
    assert [m.describe() for m in kept.messages.values()] == [
        m.describe() for m in state.senders.messages.values()
    ]
    assert all(isinstance(m.created, datetime) for m in kept.messages.values())


def test_senders_env_lines_let_the_machine_accept_them_and_stay_hidden() -> None:
    lines = env_lines(CONFIG, "http://127.0.0.1:8765")
    values = dict(shlex.split(line)[0].split("=", 1) for line in lines)
    settings = load_settings(
        standard_webhooks=values["FOLLOWUP_STANDARD_WEBHOOKS"],
        stripe_webhooks=values["FOLLOWUP_STRIPE_WEBHOOKS"],
    )
    [form_secret] = settings.standard_webhooks["site-form"]
    [payment_secret] = settings.stripe_webhooks["payment"]
    assert form_secret.get_secret_value() == CONFIG.site_form_secret.get_secret_value()
    assert payment_secret.get_secret_value() == CONFIG.payment_secret.get_secret_value()
    shown = "\n".join(masked(line) for line in lines)
    assert "whsec_" not in shown  # no secret reaches a console
