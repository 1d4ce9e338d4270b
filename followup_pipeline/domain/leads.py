"""A lead as the lead intake takes it in (docs/architecture.md §9): one ``LeadIn`` from each
source's body, the site form's (Standard Webhooks), the payment provider's (a Stripe event) and
the CRM's (an EspoCRM Lead read by the nightly sweep). Pure code: bodies in, a ``LeadIn`` or a
``LeadRejected`` naming the field out.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from followup_pipeline.domain.money import Unit, from_minor_units
from followup_pipeline.domain.text import clean_name, clean_text

LeadSource = Literal["site-form", "payment", "crm-changes"]
LeadKind = Literal["form", "payment", "crm"]
#: The payment events that bring a lead: a checkout completed and paid, or a delayed payment
#: (SEPA, Sofort) that succeeded later; every other event (a checkout completed but not paid
#: yet among them) is stored, counted and ignored.
PAID_CHECKOUT = "checkout.session.completed"
PAID_LATER = "checkout.session.async_payment_succeeded"
#: A form's fields as the product names them (``FOLLOWUP_SITE_FORM_FIELDS`` maps them to the
#: names a form builder sends, when they differ).
FORM_FIELDS = ("name", "email", "company", "phone", "message", "consent", "page")
#: The longest e-mail address there is (RFC 5321: a path of 256 with its brackets).
EMAIL_MAX = 254
#: The longest message kept from a form.
MESSAGE_LIMIT = 4000


class LeadRejected(ValueError):
    """A body that does not make a lead: ``field`` names what is wrong (for the dead letter)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


def normalise_email(value: str) -> str:
    """An e-mail address as the person's identity: one Unicode form (NFKC, so ``josé`` is one
    address however it was typed), no invisible characters, trimmed, lower-case; checked in
    linear time (one ``@``, a local part of at most 64, a dotted domain, no spaces)."""
    if len(value) > 4 * EMAIL_MAX:
        raise ValueError("is not an e-mail address (too long)")
    text = unicodedata.normalize("NFKC", value)
    email = "".join(ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cf", "Cs"))
    email = email.strip().lower()
    local, at, domain = email.partition("@")
    labels = domain.split(".")
    if (
        not at
        or not 0 < len(local) <= 64
        or len(email) > EMAIL_MAX
        or "@" in domain
        or any(ch.isspace() for ch in email)
        or len(labels) < 2
        or not all(labels)
        or len(labels[-1]) < 2
    ):
        raise ValueError("is not an e-mail address")
    return email


def _optional_name(value: str | None) -> str | None:
    return (clean_name(value) or None) if value else None


def _message(value: str | None) -> str | None:
    if not value:
        return None
    text = "".join(ch for ch in value if ch in "\n\t" or ch.isprintable()).strip()
    return text[:MESSAGE_LIMIT] or None


def _currency(value: str | None) -> str | None:
    """The currency code as it came, upper-cased, without what Postgres cannot keep."""
    return (clean_text(value).upper()[:8] or None) if value else None


Email = Annotated[str, AfterValidator(normalise_email)]
Name = Annotated[str | None, AfterValidator(_optional_name)]


class LeadIn(BaseModel):
    """One person as a source event brings them: who (the e-mail address is the identity), what
    they said or paid, and where it came from."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    email: Email
    name: Name = None
    company: Name = None
    phone: Name = None
    message: Annotated[str | None, AfterValidator(_message)] = None
    consent: bool | None = None
    page: Name = None
    amount: Decimal | None = Field(default=None, ge=0)
    currency: Annotated[str | None, AfterValidator(_currency)] = None
    #: ``major`` for an amount in the currency's own unit; ``minor`` for one kept as the provider
    #: gave it, its currency not being in the table (``domain/money.py``).
    amount_unit: Unit | None = None
    crm_lead_id: Name = None
    source: LeadSource
    kind: LeadKind


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:  # bad UTF-8 or JSON, a huge number, too deep
        raise LeadRejected("body", f"not JSON we can read ({type(error).__name__})") from None


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise LeadRejected(field, "missing, or not an object")
    return value


def _validated(values: Mapping[str, Any], names: Mapping[str, str]) -> LeadIn:
    """A ``LeadIn``, or ``LeadRejected`` naming the first wrong field as the body names it
    (``names``: a ``LeadIn`` field → its path in the body)."""
    try:
        return LeadIn.model_validate(values)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "body"
        raise LeadRejected(names.get(field, field), str(first["msg"]).lower()) from None


def from_site_form(body: bytes, fields: Mapping[str, str] | None = None) -> LeadIn:
    """The lead of a site form's Standard Webhooks body ``{"type", "timestamp", "data": {…}}``;
    ``fields`` maps a product field to the form's own name for it (``FORM_FIELDS``)."""
    raw = _object(_json(body), "body")
    data = _object(raw.get("data"), "data")
    names = {field: (fields or {}).get(field, field) for field in FORM_FIELDS}
    values = {field: data.get(name) for field, name in names.items() if name in data}
    if "email" not in values:
        raise LeadRejected(f"data.{names['email']}", "field required")
    paths = {field: f"data.{name}" for field, name in names.items()}
    return _validated({**values, "source": "site-form", "kind": "form"}, paths)


def from_payment(body: bytes) -> LeadIn | None:
    """The lead of a Stripe event: a paid ``checkout.session.completed``, or the
    ``checkout.session.async_payment_succeeded`` of a delayed payment, makes one (its customer's
    e-mail address, name and phone, the amount in the currency's major unit, or in minor units
    when the currency is not in ``domain/money.py``'s table); any other event makes none (None:
    stored and ignored)."""
    raw = _object(_json(body), "body")
    if raw.get("type") not in (PAID_CHECKOUT, PAID_LATER):
        return None
    session = _object(_object(raw.get("data"), "data").get("object"), "data.object")
    if raw.get("type") == PAID_CHECKOUT and session.get("payment_status") == "unpaid":
        return None  # a delayed payment: its async_payment_succeeded brings the lead
    customer = _object(session.get("customer_details"), "data.object.customer_details")
    total = session.get("amount_total")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int)):
        raise LeadRejected("data.object.amount_total", "not a whole number of minor units")
    currency = session.get("currency")
    code = currency if isinstance(currency, str) else None
    money = from_minor_units(total, code) if total is not None else None
    values = {
        "email": customer.get("email"),
        "name": customer.get("name"),
        "phone": customer.get("phone"),
        "amount": money.amount if money is not None else None,
        "currency": currency,
        "amount_unit": money.unit if money is not None else None,
        "source": "payment",
        "kind": "payment",
    }
    details = "data.object.customer_details."
    if values["email"] is None:
        raise LeadRejected(f"{details}email", "field required")
    paths = {
        "email": f"{details}email",
        "name": f"{details}name",
        "phone": f"{details}phone",
        "amount": "data.object.amount_total",
        "currency": "data.object.currency",
    }
    return _validated(values, paths)


def from_crm_lead(body: bytes) -> LeadIn | None:
    """The lead of an EspoCRM Lead record (the nightly sweep's event body); None for a Lead
    without an e-mail address (EspoCRM allows one: a phone number, a company), which is no person
    we can tell apart from another, and is counted, not dead-lettered."""
    record = _object(_json(body), "body")
    if not record.get("emailAddress"):
        return None
    first, last = record.get("firstName") or "", record.get("lastName") or ""
    values = {
        "email": record.get("emailAddress"),
        "name": record.get("name") or f"{first} {last}".strip() or None,
        "company": record.get("accountName"),
        "phone": record.get("phoneNumber"),
        "message": record.get("description"),
        "crm_lead_id": record.get("id"),
        "source": "crm-changes",
        "kind": "crm",
    }
    paths = {
        "email": "emailAddress",
        "company": "accountName",
        "phone": "phoneNumber",
        "message": "description",
        "crm_lead_id": "id",
    }
    return _validated(values, paths)
