"""What a lead is made of: e-mail addresses as identities, each source's body read into a
``LeadIn`` or refused naming the field, and the lead store's rules for what a later event says."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from followup_pipeline.domain.leads import (
    LeadRejected,
    from_crm_lead,
    from_payment,
    from_site_form,
    normalise_email,
)
from followup_pipeline.ingress.signatures import Rejected, verify_standard, verify_stripe
from followup_pipeline.settings import ConfigError, load_settings
from followup_pipeline.store import leads
from followup_pipeline.store.events import store_delivery


def test_email_one_person_however_the_address_is_typed() -> None:
    assert normalise_email(" Ada@Example.COM ") == "ada@example.com"
    assert normalise_email("jose\u0301@x.de") == normalise_email("jos\u00e9@x.de")  # NFKC
    assert normalise_email("lena@example.com\u200b") == "lena@example.com"  # invisible
    for bad in ("a@b", "@b.de", "a b@c.de", "a@b..de", "a@b.c", "a@@b.de", "x" * 65 + "@b.de"):
        with pytest.raises(ValueError, match="not an e-mail address"):
            normalise_email(bad)
    # A pathological address is refused by its length, before any scan of it.
    with pytest.raises(ValueError, match="too long"):
        normalise_email("a@" + "." * 900_000 + "@")


def _checkout(payment_status: str, event_type: str = "checkout.session.completed") -> bytes:
    session = {"amount_total": 1990, "currency": "eur", "payment_status": payment_status,
               "customer_details": {"email": "ada@example.com"}}  # fmt: skip
    return json.dumps({"id": "evt_1", "type": event_type, "data": {"object": session}}).encode()


def test_payment_only_a_paid_checkout_makes_a_lead() -> None:
    paid = from_payment(_checkout("paid"))
    assert paid is not None
    assert (paid.amount, paid.currency) == (Decimal("19.9"), "EUR")
    assert from_payment(_checkout("unpaid")) is None  # SEPA: wait for its success
    later = from_payment(_checkout("paid", "checkout.session.async_payment_succeeded"))
    assert later is not None
    assert later.email == "ada@example.com"
    assert from_payment(_checkout("paid", "payment_intent.created")) is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"\xff\xfe", "body"),
        (b'{"data": {"email": 1' + b"0" * 5000 + b"}}", "body"),  # a number past int's limit
        (b"[" * 100_000, "body"),  # nested too deep
        (json.dumps({"data": {"email": "a@b.de", "consent": "maybe"}}).encode(), "data.consent"),
        (json.dumps({"data": {"email": ["a@b.de"]}}).encode(), "data.email"),
        (json.dumps({"data": "flat"}).encode(), "data"),
    ],
)
def test_site_form_a_body_that_makes_no_lead_names_the_field(body: bytes, field: str) -> None:
    with pytest.raises(LeadRejected) as refused:
        from_site_form(body)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("session", "field"),
    [
        ({"amount_total": 19.9, "customer_details": {"email": "a@b.de"}}, "amount_total"),
        ({"amount_total": True, "customer_details": {"email": "a@b.de"}}, "amount_total"),
        ({"amount_total": -5, "customer_details": {"email": "a@b.de"}}, "amount_total"),
        ({"customer_details": {"email": "a@b.de", "name": 7}}, "customer_details.name"),
        ({"customer_details": {}}, "customer_details.email"),
    ],
)
def test_payment_a_session_that_makes_no_lead_names_the_field(
    session: dict[str, Any], field: str
) -> None:
    body = json.dumps({"type": "checkout.session.completed", "data": {"object": session}})
    with pytest.raises(LeadRejected) as refused:
        from_payment(body.encode())
    assert refused.value.field == f"data.object.{field}"


def test_crm_a_lead_without_an_address_is_no_person() -> None:
    assert from_crm_lead(json.dumps({"id": "L1", "phoneNumber": "+49"}).encode()) is None
    lead = from_crm_lead(json.dumps({"id": "L2", "firstName": "Grace", "lastName": "Hopper",
                                     "emailAddress": "G@Navy.example"}).encode())  # fmt: skip
    assert lead is not None
    assert (lead.name, lead.crm_lead_id) == ("Grace Hopper", "L2")


def test_signatures_a_timestamp_that_is_no_number_is_refused_not_a_crash() -> None:
    for stamp in ("--1", "1e9", " 1", "0x10", "9" * 13):
        with pytest.raises(Rejected) as stripe:
            verify_stripe({"stripe-signature": f"t={stamp},v1=00"}, b"{}", ["whsec_x"], now=0)
        assert stripe.value.status == 401
        headers = {"webhook-id": "m", "webhook-timestamp": stamp, "webhook-signature": "v1,AA=="}
        with pytest.raises(Rejected) as standard:
            verify_standard(headers, b"{}", ["whsec_QUJD"], now=0)
        assert standard.value.status == 401


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_short", "not-a-secret-at-all-12345"])
def test_settings_refuse_a_signing_secret_anyone_could_compute(secret: str) -> None:
    with pytest.raises(ConfigError, match="signing secret"):
        load_settings(stripe_webhooks=json.dumps({"payment": [secret]}))
    with pytest.raises(ConfigError, match=r"signing secret|no secret"):
        load_settings(standard_webhooks=json.dumps({"site-form": [secret]}))


def _event(db: psycopg.Connection[Any], name: str) -> int:
    stored = store_delivery(
        db, source="site-form", event_type="form.submitted", body=name.encode(), headers={},
        delivery_id=name,
    )  # fmt: skip
    return stored.event_id


def test_store_the_newest_form_decides_consent_whatever_order_they_are_handled_in(
    db: psycopg.Connection[Any],
) -> None:
    t1 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    rows = [
        ("form-1", "site-form", "form", t1, True),
        ("pay", "payment", "payment", t1 + timedelta(hours=3), None),
        # The withdrawal came before the payment, but is handled last (a retry).
        ("form-2", "site-form", "form", t1 + timedelta(hours=1), False),
    ]
    for name, source, kind, at, consent in rows:
        row = leads.LeadRow(email="ada@example.com", source=source, kind=kind, at=at,
                            consent=consent)  # fmt: skip
        with db.transaction():
            leads.link_event(db, event_id=_event(db, name), lead=row)
    # An older event handled late does not become the first.
    late = leads.LeadRow(email="ada@example.com", source="payment", kind="payment",
                         at=t1 - timedelta(days=1))  # fmt: skip
    with db.transaction():
        leads.link_event(db, event_id=_event(db, "old-pay"), lead=late)
    lead = db.execute("SELECT consent, first_source, first_seen_at FROM leads").fetchone()
    assert lead == {"consent": False, "first_source": "payment",
                    "first_seen_at": t1 - timedelta(days=1)}  # fmt: skip


def test_classification_text_leaves_out_a_pages_query() -> None:
    from followup_pipeline.domain.lead_text import classification_text
    from followup_pipeline.domain.leads import LeadIn

    lead = LeadIn(email="a@b.de", page="/pricing?name=anna&mail=a%40b.de#top", source="site-form",
                  kind="form")  # fmt: skip
    text = classification_text(lead)
    assert "Page: /pricing" in text
    assert "anna" not in text
