"""A payment's amount in its currency's own unit, from Stripe's event through ``lead_intake`` on a
real Postgres to the stored lead event and the sandbox's EspoCRM Lead; an unknown currency kept in
minor units, counted and named, and never written to the CRM."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from typing import Any

import dagster as dg
import psycopg
import pytest

from followup_pipeline.defs import build_definitions
from followup_pipeline_tests.defs.lead_intake.test_crm_upsert import _crm
from followup_pipeline_tests.defs.lead_intake.test_intake import (
    _intake,
    _payment,
    _settings,
    _store,
)

#: What the machine may write to the CRM (the sandbox lists CHF too: left out here on purpose).
CRM_CURRENCIES = "EUR,USD,JPY,KRW,KWD,BHD"
#: Stripe's currency and amount_total → the stored amount and its unit → the CRM's amount.
CASES: list[tuple[str, int, Decimal, str, float | None]] = [
    ("jpy", 5000, Decimal("5000"), "major", 5000.0),  # ¥5,000, not 50
    ("krw", 50000, Decimal("50000"), "major", 50000.0),
    ("eur", 4900, Decimal("49.00"), "major", 49.0),
    ("usd", 1999, Decimal("19.99"), "major", 19.99),
    ("kwd", 12340, Decimal("12.340"), "major", 12.34),  # three decimals, not 123.40
    ("bhd", 1230, Decimal("1.230"), "major", 1.23),
    ("chf", 2500, Decimal("25.00"), "major", None),  # known, but not in the CRM's list
    ("xyz", 5000, Decimal("5000"), "minor", None),  # unknown: not guessed
]


def _paid(email: str, currency: str, total: int) -> bytes:
    body = json.loads(_payment(email))
    body["data"]["object"].update(currency=currency, amount_total=total)
    return json.dumps(body).encode()


def _crm_amount(sandbox: str, email: str) -> tuple[Any, Any]:
    params = {
        "where[0][type]": "equals",
        "where[0][attribute]": "emailAddress",
        "where[0][value]": email,
        "select": "id,opportunityAmount,opportunityAmountCurrency",
    }
    with _crm(sandbox) as crm:
        [lead] = crm.get("/Lead", params=params).raise_for_status().json()["list"]
    return lead["opportunityAmount"], lead["opportunityAmountCurrency"]


def test_amounts_of_each_currency_reach_the_lead_event_and_the_crm_in_their_own_unit(
    db: psycopg.Connection[Any], db_url: str, sandbox: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A Lead typed into EspoCRM's form before the payment: the default currency, no amount.
    typed = {
        "lastName": "Sato",
        "emailAddress": "jpy@example.com",
        "opportunityAmountCurrency": "EUR",
    }
    with _crm(sandbox) as crm:
        crm.post("/Lead", json=typed).raise_for_status()
    events = {
        currency: _store(db, "payment", _paid(f"{currency}@example.com", currency, total),
                         f"evt_{currency}").event_id
        for currency, total, *_ in CASES
    }  # fmt: skip
    settings = _settings(
        event_backoff_base_s=0, lead_intake_mode="live", lead_crm_currencies=CRM_CURRENCIES
    )
    defs = build_definitions(settings)
    with caplog.at_level(logging.WARNING), dg.instance_for_test() as instance:
        counts = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert (counts["normalised"], counts["unknown_currency"]) == (len(CASES), 1)
    assert (counts["crm_created"], counts["crm_updated"]) == (len(CASES) - 1, 1)
    stored = {
        row["email"]: row
        for row in db.execute(
            "SELECT l.email, e.amount, e.currency, e.amount_unit"
            " FROM lead_events e JOIN leads l ON l.id = e.lead_id"
        )
    }
    for currency, _, amount, unit, crm_amount in CASES:
        email = f"{currency}@example.com"
        row = stored[email]
        assert (row["amount"], row["currency"], row["amount_unit"]) == (
            amount, currency.upper(), unit
        )  # fmt: skip
        assert row["amount"].as_tuple().exponent == amount.as_tuple().exponent  # 1.230, not 1.23
        expected = (crm_amount, currency.upper()) if crm_amount is not None else (None, None)
        assert _crm_amount(sandbox, email) == expected, currency
    # The unknown currency is named in a warning with its event.
    [warning] = [r.getMessage() for r in caplog.records if "'XYZ'" in r.getMessage()]
    assert f"event {events['xyz']} (evt_xyz)" in warning
    assert "minor units" in warning
