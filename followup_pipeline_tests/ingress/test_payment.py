"""The payment source, signed as Stripe signs: over real HTTP into a real Postgres."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from followup_pipeline.ingress.signatures import Rejected, stripe_signature, verify_stripe
from followup_pipeline.settings import ConfigError, load_settings
from followup_pipeline.store.retention import empty_event_bodies

from .conftest import IngressFactory, Linked

NEW_SECRET = "whsec_Xj4rRAR0lRCkMMPdPb2mJnvs0CyPSmNN"
OLD_SECRET = "whsec_8qSzQ1bGZ5t9wLxW0kYpVn3HcR7uDdEe"
EVENT = {
    "id": "evt_1PqRsT2eZvKYlo2C0aBcDeFg",
    "object": "event",
    "api_version": "2024-06-20",
    "created": 1_767_000_000,
    "data": {
        "object": {
            "id": "cs_test_a1B2c3",
            "object": "checkout.session",
            "amount_total": 49000,
            "currency": "eur",
            "payment_status": "paid",
            "customer_details": {"email": "k.brandt@example.com", "name": "K. Brandt"},
            "metadata": {},
        }
    },
    "livemode": False,
    "type": "checkout.session.completed",
}
BODY = json.dumps(EVENT, indent=2).encode()


class IngressClock:
    """The ingress's clock (its ``now`` seam), moved by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _stripe(body: bytes, *secrets: str, at: float | None = None, extra: str = "") -> dict[str, str]:
    stamp = int(time.time() if at is None else at)
    signatures = [f"v1={stripe_signature(secret, stamp, body)}" for secret in secrets]
    return {"Stripe-Signature": ",".join([f"t={stamp}", *signatures]) + extra}


def _events(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(db.execute("SELECT * FROM events ORDER BY id").fetchall())


def test_payment_signature_is_stripes_with_the_whole_secret_as_key() -> None:
    # Stripe's SDKs key the HMAC with the secret's own UTF-8 bytes, `whsec_` included (not
    # base64-decoded as Standard Webhooks' secrets are), over "{t}.{raw body}", in hex.
    body = b'{\n  "id": "evt_test_webhook",\n  "object": "event"\n}'
    signature = stripe_signature("whsec_test_secret", 1614265330, body)
    assert signature == "af4ead0627a34a8cca29808e8de9ada8e41a92e6237c63cef6eacf51d36cca34"
    header = {"stripe-signature": f"t=1614265330,v1={signature},v0=decoy"}
    verify_stripe(header, body, ["whsec_test_secret"], now=1614265330 + 300)
    with pytest.raises(Rejected, match="5 minutes"):
        verify_stripe(header, body, ["whsec_test_secret"], now=1614265330 + 301)


def test_payment_event_is_stored_pending_under_its_event_id(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    with make_ingress(stripe_webhooks={"payment": [NEW_SECRET]}) as ingress:
        answer = ingress.post("/webhooks/payment", content=BODY, headers=_stripe(BODY, NEW_SECRET))
    assert (answer.status_code, answer.json()["duplicate"]) == (200, False), answer.text
    [event] = _events(db)
    assert (event["source"], event["event_type"], event["status"], event["delivery_id"]) == (
        "payment",
        "checkout.session.completed",
        "pending",
        EVENT["id"],
    )
    assert bytes(event["body"]) == BODY
    assert event["headers"]["stripe-signature"].startswith("t=")


def _resigned_at_another_time() -> dict[str, str]:
    stamp = int(time.time())
    signature = stripe_signature(NEW_SECRET, stamp, BODY)
    return {"Stripe-Signature": f"t={stamp - 1},v1={signature}"}


def _refusals() -> list[Any]:
    # Signed when the test runs, not at collection: their clock is the point.
    cases: list[tuple[str, Callable[[], dict[str, str]], str]] = [
        ("wrong secret", lambda: _stripe(BODY, "whsec_not_ours"), "bad_signature"),
        (
            "stale by 301 s",
            lambda: _stripe(BODY, NEW_SECRET, at=time.time() - 301),
            "stale_timestamp",
        ),
        (
            "future by 302 s",
            lambda: _stripe(BODY, NEW_SECRET, at=time.time() + 302),
            "stale_timestamp",
        ),
        ("no header", dict, "missing_signature"),
        (
            "only the test-mode v0",
            lambda: {"Stripe-Signature": f"t={int(time.time())},v0=00"},
            "missing_signature",
        ),
        ("no timestamp", lambda: {"Stripe-Signature": "v1=" + "0" * 64}, "bad_timestamp"),
        ("garbled timestamp", lambda: {"Stripe-Signature": "t=1e9,v1=00"}, "bad_timestamp"),
        (
            "signed for another body",
            lambda: _stripe(BODY.replace(b"49000", b"4900"), NEW_SECRET),
            "bad_signature",
        ),
        ("signed at another time", _resigned_at_another_time, "bad_signature"),
    ]
    return [pytest.param(headers, reason, id=name) for name, headers, reason in cases]


@pytest.mark.parametrize(("headers", "reason"), _refusals())
def test_payment_refused_is_401_and_stores_nothing(
    make_ingress: IngressFactory,
    db: psycopg.Connection[Any],
    headers: Callable[[], dict[str, str]],
    reason: str,
) -> None:
    with make_ingress(stripe_webhooks={"payment": [NEW_SECRET]}) as ingress:
        answer = ingress.post("/webhooks/payment", content=BODY, headers=headers())
    assert (answer.status_code, answer.json()["error"]) == (401, reason)
    assert _events(db) == []


def test_payment_signed_with_a_rolled_secret_is_accepted(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    def event(n: int) -> bytes:
        return BODY.replace(EVENT["id"].encode(), f"evt_rolled_{n}".encode())

    with make_ingress(stripe_webhooks={"payment": [NEW_SECRET, OLD_SECRET]}) as ingress:
        # While the old secret is active Stripe signs with both; then with the new one alone
        # (the old one removed from the header), while we still hold both.
        both = ingress.post(
            "/webhooks/payment", content=event(1), headers=_stripe(event(1), OLD_SECRET, NEW_SECRET)
        )
        new = ingress.post(
            "/webhooks/payment", content=event(2), headers=_stripe(event(2), NEW_SECRET)
        )
        # A bad v1 beside a good one does not spoil it.
        mixed = _stripe(event(3), NEW_SECRET, extra=",v1=" + "0" * 64)
        third = ingress.post("/webhooks/payment", content=event(3), headers=mixed)
    assert [a.status_code for a in (both, new, third)] == [200, 200, 200]
    with make_ingress(stripe_webhooks={"payment": [NEW_SECRET]}) as ingress:
        # Once the old secret is gone from our settings, what it alone signed is refused.
        old = ingress.post(
            "/webhooks/payment", content=event(4), headers=_stripe(event(4), OLD_SECRET)
        )
    assert (old.status_code, old.json()["error"]) == (401, "bad_signature")
    assert [e["delivery_id"] for e in _events(db)] == [
        "evt_rolled_1",
        "evt_rolled_2",
        "evt_rolled_3",
    ]


def test_payment_redelivered_twice_and_71_hours_later_is_one_event(
    make_ingress: IngressFactory, db: psycopg.Connection[Any]
) -> None:
    clock = IngressClock()
    settings: dict[str, Any] = {
        "stripe_webhooks": {"payment": [NEW_SECRET]},
        "app_kwargs": {"now": clock},
    }
    with make_ingress(**settings) as ingress:
        first = ingress.post(
            "/webhooks/payment", content=BODY, headers=_stripe(BODY, NEW_SECRET, at=clock.now)
        )
        clock.now += 7  # Stripe's retry: the same event, signed afresh
        again = ingress.post(
            "/webhooks/payment", content=BODY, headers=_stripe(BODY, NEW_SECRET, at=clock.now)
        )
        # 71 hours on, the event processed and its body purged since (a purge of everything
        # done before now): Stripe's last retries come within three days.
        clock.now += 71 * 3600
        db.execute(
            "UPDATE events SET received_at = received_at - interval '71 hours', status = 'done', "
            "processed_at = now() - interval '70 hours'"
        )
        assert empty_event_bodies(db, before=datetime.now(UTC), dry_run=False) == 1
        late = ingress.post(
            "/webhooks/payment", content=BODY, headers=_stripe(BODY, NEW_SECRET, at=clock.now)
        )
        metrics = ingress.get("/metrics").text
    assert [a.status_code for a in (first, again, late)] == [200] * 3
    assert [a.json()["duplicate"] for a in (first, again, late)] == [False, True, True]
    assert len({a.json()["event"] for a in (first, again, late)}) == 1
    [event] = _events(db)
    assert (event["delivery_id"], event["duplicate_count"], bytes(event["body"])) == (
        EVENT["id"],
        2,
        b"",
    )
    assert 'followup_ingress_duplicates_total{source="payment"} 2' in metrics


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"object": "event", "type": "checkout.session.completed"}', "string id"),
        (b'{"id": 42, "type": "checkout.session.completed"}', "string id"),
        (b'["evt_1"]', "JSON objects"),
        (b'{"id": "evt_1", "type": "che', "not JSON"),
    ],
)
def test_payment_signed_body_without_an_event_id_is_a_dead_letter(
    make_ingress: IngressFactory, db: psycopg.Connection[Any], body: bytes, reason: str
) -> None:
    with make_ingress(stripe_webhooks={"payment": [NEW_SECRET]}) as ingress:
        answer = ingress.post("/webhooks/payment", content=body, headers=_stripe(body, NEW_SECRET))
    assert (answer.status_code, answer.json()["error"]) == (400, "unparseable")
    [event] = _events(db)
    assert (event["status"], event["dead_step"], event["delivery_id"]) == ("dead", "ingress", None)
    assert reason in event["last_error"]
    assert bytes(event["body"]) == body


def test_payment_a_source_in_both_maps_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="FOLLOWUP_STRIPE_WEBHOOKS: source"):
        load_settings(
            standard_webhooks='{"payment": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}',
            stripe_webhooks='{"payment": ["whsec_anotherSigningSecret01"]}',
        )


def test_payment_from_the_sandbox_and_its_redelivery_71_hours_later(
    linked: Linked, db: psycopg.Connection[Any]
) -> None:
    # What Stripe sends, as the sandbox sends it: its event, its header, its fresh signature on
    # every attempt; the ingress's clock is the sandbox's.
    sent = linked.sandbox.post(
        "/_sandbox/payments",
        json={"email": "k.brandt@example.com", "name": "K. Brandt", "amount_total": 129900},
    )
    assert sent.status_code == 201, sent.text
    evt = sent.json()["id"]
    assert evt.startswith("evt_")
    assert [d["status"] for d in sent.json()["deliveries"]] == [200]
    linked.sandbox.post("/_sandbox/clock", json={"advance_seconds": 71 * 3600})
    again = linked.sandbox.post(f"/_sandbox/payments/{evt}/redeliver").json()["deliveries"]
    assert [(d["status"], d["redelivery"]) for d in again] == [(200, True)]
    metrics = linked.ingress.get("/metrics").text
    assert 'followup_ingress_duplicates_total{source="payment"} 1' in metrics
    assert 'followup_ingress_received_total{source="payment"} 1' in metrics
    [event] = _events(db)
    assert (event["source"], event["event_type"], event["status"]) == (
        "payment",
        "checkout.session.completed",
        "pending",
    )
    assert (event["delivery_id"], event["duplicate_count"]) == (evt, 1)
    message = linked.state.senders.messages[evt]
    assert bytes(event["body"]) == message.body  # the same bytes on every attempt
    assert timedelta(hours=71) <= linked.state.clock.now() - message.created
    stored = json.loads(message.body)
    assert stored["data"]["object"]["amount_total"] == 129900
