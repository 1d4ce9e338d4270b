"""What the lead intake writes to the CRM's ``Lead`` (docs/architecture.md §9, crm_upsert): the
person's own attributes, taken from what they told us, and the classification, in the attributes
``FOLLOWUP_LEAD_CRM_FIELDS`` names. Pure code: a lead and its classification in, the attributes to
create with or to change out.

What a person in the CRM typed wins: the person's attributes (name, address, phone, company, the
source) and ``description`` are only filled where the CRM's Lead has none; the other mapped
attributes (the classification's own, custom fields) hold ours.

A payment's amount goes to the Lead's ``opportunityAmount`` and ``opportunityAmountCurrency``
(EspoCRM's currency field), fill-only like the person's attributes, the amount and its currency
as one value: the newest payment's amount in the currency's major unit (``domain/money.py``).
An amount kept in minor units (a currency not in that table) is never written: the number would
be wrong in the CRM. Nor is one in a currency the CRM does not list
(``FOLLOWUP_LEAD_CRM_CURRENCIES``): EspoCRM refuses a currency outside its Currency List (its
``validCurrency`` check, a 400), and with it the whole write.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

#: What a classification holds, by the names ``FOLLOWUP_LEAD_CRM_FIELDS`` maps.
CLASSIFICATION_ITEMS = ("segment", "intent", "priority", "summary", "language")
#: By default: the summary in the Lead's description, the rest in three custom fields an admin
#: adds in EspoCRM's Entity Manager (EspoCRM prefixes custom fields with ``c``).
DEFAULT_LEAD_CRM_FIELDS: Mapping[str, str] = {
    "summary": "description",
    "priority": "cFollowupPriority",
    "segment": "cFollowupSegment",
    "intent": "cFollowupIntent",
}
#: An attribute name as EspoCRM spells one.
CRM_ATTRIBUTE = re.compile(r"[a-zA-Z][a-zA-Z0-9]{0,99}")
#: The attributes of the person, written from what they told us (never a classification's).
LEAD_OWN_ATTRIBUTES = (
    "firstName",
    "lastName",
    "emailAddress",
    "phoneNumber",
    "accountName",
    "source",
)
#: EspoCRM's currency field of a Lead: the amount and its currency code.
AMOUNT = "opportunityAmount"
AMOUNT_CURRENCY = "opportunityAmountCurrency"
AMOUNT_ATTRIBUTES = (AMOUNT, AMOUNT_CURRENCY)
#: Attributes filled only where the CRM has none (a salesperson's text wins).
FILL_ONLY = (*LEAD_OWN_ATTRIBUTES, "description", *AMOUNT_ATTRIBUTES)
#: EspoCRM's ``Lead.source`` option for each of our sources (a CRM lead keeps its own).
CRM_SOURCE = {"site-form": "Web Site", "payment": "Other"}


#: A CRM Lead's attributes by name (an installation has custom ones: the set is open).
Attributes = Mapping[str, object]


@dataclass(frozen=True)
class CrmLead:
    """A CRM Lead as the CRM answered it: its id, when it last saved it, every attribute."""

    id: str
    modified_at: datetime | None
    attributes: Attributes


@dataclass(frozen=True)
class LeadFacts:
    """What we know of a person, as the lead store keeps it."""

    email: str
    name: str | None = None
    company: str | None = None
    phone: str | None = None
    first_source: str | None = None
    #: The newest payment's amount, in its currency's major unit, and the currency's code.
    amount: Decimal | None = None
    currency: str | None = None


@dataclass(frozen=True)
class ClassificationFacts:
    """A lead's classification, as stored."""

    segment: str
    intent: str
    priority: int
    summary: str
    language: str

    def item(self, name: str) -> str | int:
        """One item by its name in ``CLASSIFICATION_ITEMS``."""
        value: str | int = getattr(self, name)
        return value


def split_name(name: str | None) -> tuple[str | None, str | None]:
    """First and last name of a full name: the last word is the last name (one word: a last
    name only, which EspoCRM accepts)."""
    words = (name or "").split()
    if not words:
        return None, None
    if len(words) == 1:
        return None, words[0]
    return " ".join(words[:-1]), words[-1]


def wanted_attributes(
    lead: LeadFacts,
    classification: ClassificationFacts | None,
    fields: Mapping[str, str],
    currencies: Collection[str] = (),
) -> dict[str, object]:
    """Every attribute the CRM's Lead should hold for this person (None values left out); the
    payment's amount only in one of ``currencies``, those the CRM lists."""
    first, last = split_name(lead.name)
    wanted: dict[str, object] = {
        "firstName": first,
        "lastName": last,
        "emailAddress": lead.email,
        "phoneNumber": lead.phone,
        "accountName": lead.company,
        "source": CRM_SOURCE.get(lead.first_source or ""),
    }
    if lead.amount is not None and lead.currency in currencies:
        # EspoCRM keeps a currency field as a float, sent as a JSON number.
        wanted[AMOUNT] = float(lead.amount)
        wanted[AMOUNT_CURRENCY] = lead.currency
    if classification is not None:
        for item, attribute in fields.items():
            wanted[attribute] = classification.item(item)
    return {key: value for key, value in wanted.items() if value is not None}


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _same(ours: object, theirs: object) -> bool:
    if isinstance(ours, str) and isinstance(theirs, str):
        return ours.strip().casefold() == theirs.strip().casefold()
    return ours == theirs or str(ours) == str(theirs)


def changes(
    wanted: Attributes,
    current: Attributes,
    ours: Attributes | None = None,
) -> dict[str, object]:
    """What an update of the CRM's Lead ``current`` must send so that it holds ``wanted``: the
    person's attributes, the description and the amount (with its currency) only where the CRM's
    are empty; the classification's where they differ and are empty or still what we wrote
    (``ours``, what the CRM held as ours after our last write): a value a person changed since
    is theirs. Empty: nothing to write."""
    found: dict[str, object] = {}
    for attribute, value in wanted.items():
        theirs = current.get(attribute)
        if _empty(theirs):
            found[attribute] = value
        elif attribute in FILL_ONLY or _same(value, theirs):
            continue
        elif ours is not None and attribute in ours and _same(ours[attribute], theirs):
            found[attribute] = value
    # The amount and its currency are one value: both written, or neither (a Lead made in
    # EspoCRM's form holds the default currency without an amount).
    if AMOUNT in found and AMOUNT_CURRENCY in wanted:
        found[AMOUNT_CURRENCY] = wanted[AMOUNT_CURRENCY]
    else:
        found.pop(AMOUNT_CURRENCY, None)
    return found


def held_as_ours(wanted: Attributes, record: Attributes) -> dict[str, object]:
    """The classification's attributes the CRM's Lead ``record`` holds as we want them: what a
    later update may change again (a person's value is left alone)."""
    return {
        attribute: value
        for attribute, value in wanted.items()
        if attribute not in FILL_ONLY and _same(value, record.get(attribute))
    }


def differences(would: Attributes, crm: Attributes | None) -> list[tuple[str, object, object]]:
    """Where the CRM's Lead now (None: it has none) is not what the pipeline would have written:
    (attribute, ours, the CRM's), in the order of ``would``."""
    return [
        (attribute, value, None if crm is None else crm.get(attribute))
        for attribute, value in would.items()
        if crm is None or not _same(value, crm.get(attribute))
    ]
