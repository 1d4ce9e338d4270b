"""A payment's amount in its currency's own unit (docs/architecture.md §9, normalise). Pure code:
the provider's whole number of minor units and a currency code in, a ``Money`` out.

Stripe gives every amount in the currency's smallest unit: ``amount_total: 4900`` is 49.00 EUR,
``5000`` is ¥5,000 (the yen has no minor unit), ``12340`` is 12.340 KWD (the dinar has three
decimals). The number of decimals is the currency's ISO 4217 exponent, as Stripe's "Supported
currencies" page documents it, with that page's own exceptions:

- Zero-decimal currencies (the amount is whole units): BIF, CLP, DJF, GNF, JPY, KMF, KRW, MGA,
  PYG, RWF, VND, VUV, XAF, XOF, XPF. MGA is Stripe's exception: ISO 4217 gives the ariary two
  decimals, Stripe none.
- Three-decimal currencies: BHD, JOD, KWD, OMR, TND (Stripe asks for a last digit of 0, which
  changes nothing in reading them).
- Stripe's "special cases": ISK became a zero-decimal currency (2023-04-14) but, for backwards
  compatibility, amounts still carry two decimals (5 ISK is ``500``, always divisible by 100), so
  its exponent here is 2 where ISO 4217 says 0. UGX stands in Stripe's zero-decimal list, yet its
  special case says the same as ISK's (5 UGX is ``500``): 2, where ISO 4217 says 0. HUF and TWD
  are zero-decimal for payouts only; charges carry two decimals: 2, as in ISO 4217.
- Every other currency of Stripe's presentment list has two decimals.

A code that is not in the table is never guessed: its amount is kept as it came, in minor units,
with the code and the unit ``minor``, so that an operator can tell it apart and convert it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal


def _codes(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Stripe's zero-decimal currencies (without UGX, one of its special cases).
ZERO_DECIMAL = _codes("BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF VND VUV XAF XOF XPF")
#: Stripe's three-decimal currencies.
THREE_DECIMAL = _codes("BHD JOD KWD OMR TND")
#: The rest of Stripe's presentment currencies: two decimals (ISK and UGX by Stripe's special
#: cases, HUF and TWD for charges).
TWO_DECIMAL = _codes(
    """
    AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BRL BSD BWP BYN BZD CAD
    CDF CHF CNY COP CRC CVE CZK DKK DOP DZD EGP ETB EUR FJD FKP GBP GEL GIP GMD GTQ GYD HKD HNL
    HTG HUF IDR ILS INR ISK JMD KES KGS KHR KYD KZT LAK LBP LKR LRD LSL MAD MDL MKD MMK MNT MOP
    MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR
    SBD SCR SEK SGD SHP SLE SOS SRD STD SZL THB TJS TOP TRY TTD TWD TZS UAH UGX USD UYU UZS WST
    XCD YER ZAR ZMW
    """
)
#: Decimals of each currency we know, by its upper-case code.
EXPONENTS: dict[str, int] = {
    **dict.fromkeys(TWO_DECIMAL, 2),
    **dict.fromkeys(ZERO_DECIMAL, 0),
    **dict.fromkeys(THREE_DECIMAL, 3),
}

Unit = Literal["major", "minor"]


@dataclass(frozen=True)
class Money:
    """An amount, its currency code (upper case) and its unit: ``major`` (euros, yen, dinars)
    when the currency is in the table, else ``minor`` (the provider's number, unconverted)."""

    amount: Decimal
    currency: str | None
    unit: Unit


def exponent(currency: str | None) -> int | None:
    """The decimals of a currency's minor unit as Stripe counts them; None for a code not in
    the table (or none)."""
    if not currency:
        return None
    return EXPONENTS.get(currency.strip().upper())


def from_minor_units(amount: int, currency: str | None) -> Money:
    """A provider's amount in minor units as ``Money``: in the major unit when the currency is
    known (``4900 eur`` → 49.00 EUR, ``5000 jpy`` → 5000 JPY, ``12340 kwd`` → 12.340 KWD), else
    the amount as it came, marked ``minor``."""
    code = currency.strip().upper() if currency else None
    places = exponent(code)
    if places is None:
        return Money(Decimal(amount), code, "minor")
    # Exact for any size: the digits as they came, the point moved (no context rounding).
    sign, digits, _ = Decimal(amount).as_tuple()
    return Money(Decimal((sign, digits, -places)), code, "major")
