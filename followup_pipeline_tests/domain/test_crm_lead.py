"""What a CRM Lead gets of a payment: its amount in a currency the CRM lists, with its currency as
one fill-only value."""

from __future__ import annotations

from decimal import Decimal

import pytest

from followup_pipeline.domain.crm_lead import LeadFacts, changes, wanted_attributes

PAID = LeadFacts(email="ada@example.com", amount=Decimal("5000"), currency="JPY")


@pytest.mark.parametrize(
    ("facts", "currencies", "expected"),
    [
        (PAID, ["EUR", "JPY"], {"opportunityAmount": 5000.0, "opportunityAmountCurrency": "JPY"}),
        (PAID, ["EUR"], {}),  # EspoCRM would refuse the currency, and the whole write with it
        (LeadFacts(email="ada@example.com"), ["EUR"], {}),  # no payment in a known currency
    ],
)
def test_crm_lead_amount_only_in_a_currency_the_crm_lists(
    facts: LeadFacts, currencies: list[str], expected: dict[str, object]
) -> None:
    wanted = wanted_attributes(facts, None, {}, currencies)
    amount = {key: value for key, value in wanted.items() if key.startswith("opportunityAmount")}
    assert amount == expected


@pytest.mark.parametrize(
    ("crm", "expected"),
    [
        # EspoCRM's form leaves the default currency on a Lead without an amount: both are ours.
        (
            {"opportunityAmount": None, "opportunityAmountCurrency": "EUR"},
            {"opportunityAmount": 5000.0, "opportunityAmountCurrency": "JPY"},
        ),
        # A salesperson's amount wins, its currency with it (even an empty one).
        ({"opportunityAmount": 120.0, "opportunityAmountCurrency": "EUR"}, {}),
        ({"opportunityAmount": 120.0, "opportunityAmountCurrency": None}, {}),
        ({}, {"opportunityAmount": 5000.0, "opportunityAmountCurrency": "JPY"}),
    ],
)
def test_crm_lead_amount_and_currency_are_filled_together_or_not_at_all(
    crm: dict[str, object], expected: dict[str, object]
) -> None:
    wanted = wanted_attributes(PAID, None, {}, ["JPY"])
    current = {**wanted, "opportunityAmount": None, "opportunityAmountCurrency": None, **crm}
    assert changes(wanted, current) == expected
