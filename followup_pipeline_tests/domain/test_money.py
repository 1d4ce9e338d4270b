"""A provider's amount in minor units read in its currency's own unit, by the table of decimals."""

from __future__ import annotations

from decimal import Decimal

import pytest

from followup_pipeline.domain.money import (
    EXPONENTS,
    THREE_DECIMAL,
    TWO_DECIMAL,
    ZERO_DECIMAL,
    Money,
    exponent,
    from_minor_units,
)


@pytest.mark.parametrize(
    ("minor", "currency", "expected"),
    [
        # Zero-decimal: the number is whole units.
        (5000, "jpy", Money(Decimal("5000"), "JPY", "major")),
        (50000, "krw", Money(Decimal("50000"), "KRW", "major")),
        (250000, "vnd", Money(Decimal("250000"), "VND", "major")),
        (1200, "clp", Money(Decimal("1200"), "CLP", "major")),
        (1000, "mga", Money(Decimal("1000"), "MGA", "major")),  # ISO 4217: 2; Stripe: 0
        # Two decimals.
        (4900, "eur", Money(Decimal("49.00"), "EUR", "major")),
        (1999, "usd", Money(Decimal("19.99"), "USD", "major")),
        (1, "gbp", Money(Decimal("0.01"), "GBP", "major")),
        (2500, "chf", Money(Decimal("25.00"), "CHF", "major")),
        # Three decimals.
        (12340, "kwd", Money(Decimal("12.340"), "KWD", "major")),
        (1230, "bhd", Money(Decimal("1.230"), "BHD", "major")),
        (5120, "jod", Money(Decimal("5.120"), "JOD", "major")),
        (990, "omr", Money(Decimal("0.990"), "OMR", "major")),
        (10000, "tnd", Money(Decimal("10.000"), "TND", "major")),
        # Stripe's special cases: ISK and UGX carry two decimals (ISO 4217: none); HUF and TWD
        # are zero-decimal for payouts only, charges have two.
        (500, "isk", Money(Decimal("5.00"), "ISK", "major")),
        (500, "ugx", Money(Decimal("5.00"), "UGX", "major")),
        (1045, "huf", Money(Decimal("10.45"), "HUF", "major")),
        (80045, "twd", Money(Decimal("800.45"), "TWD", "major")),
        # Never guessed: kept as it came, in minor units, with its code.
        (5000, "xyz", Money(Decimal("5000"), "XYZ", "minor")),
        (5000, "", Money(Decimal("5000"), None, "minor")),
        (5000, None, Money(Decimal("5000"), None, "minor")),
        (0, "EUR", Money(Decimal("0.00"), "EUR", "major")),
        # Exact at any size: no rounding to the decimal context's 28 digits.
        (10**40 + 1, "eur", Money(Decimal("1" + "0" * 38 + ".01"), "EUR", "major")),
    ],
)
def test_money_from_minor_units_by_the_currency_table(
    minor: int, currency: str | None, expected: Money
) -> None:
    money = from_minor_units(minor, currency)
    assert money == expected
    # The same number of decimals as the currency has (0.01, not 0.010): what Postgres keeps.
    assert money.amount.as_tuple() == expected.amount.as_tuple()


def test_money_table_holds_each_code_once_as_three_capital_letters() -> None:
    groups = (ZERO_DECIMAL, TWO_DECIMAL, THREE_DECIMAL)
    assert sum(len(group) for group in groups) == len(EXPONENTS)  # no code in two groups
    assert all(len(code) == 3 and code.isascii() and code.isupper() for code in EXPONENTS)
    codes = (" jpy ", "Eur", "KWD", "xxx", None)
    assert [exponent(code) for code in codes] == [0, 2, 3, None, None]
