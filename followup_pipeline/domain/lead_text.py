"""What the model is told of a person (docs/architecture.md §9, classify): the text about the
lead of one event, with what we know of the same person so far (their earlier events: what they
wrote, paid and where from) and the company facts of the lookup. Pure code: personal data (their
name, address, phone) stays here, masked or left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from followup_pipeline.domain.emails import masked
from followup_pipeline.domain.leads import LeadIn
from followup_pipeline.domain.text import clean_name

#: The company facts that are sent (from the company lookup); any other key stays here.
COMPANY_FACTS = ("name", "industry", "size", "country")
#: The longest company fact sent: a lookup's value is data from outside, bounded like a name.
FACT_MAX = 200
#: A lead's own name shorter than this is not looked for in the message (it would hit words).
NAME_MIN = 3
#: A person's earlier events told to the model: the newest few, each message cut short.
EARLIER_MAX = 5
EARLIER_MESSAGE_MAX = 600


def _fact(value: object) -> str:
    return clean_name(str(value), FACT_MAX) if value is not None else ""


def _without_name(text: str, name: str | None) -> str:
    """``text`` with the lead's own full name (any case, as a whole word) replaced by
    ``[name]``: a signature names the person the lead is, which the model need not know."""
    if not name or len(name) < NAME_MIN:
        return text
    return re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", "[name]", text, flags=re.IGNORECASE)


def _page(page: str | None) -> str:
    # A page's query and fragment may carry what a form put there (?name=…): left out.
    return _fact((page or "").split("?")[0].split("#")[0])


def money_text(amount: Decimal | None, currency: str | None, unit: str | None) -> str:
    """An amount as the model reads it: ``49.00 EUR``; one kept in minor units (its currency not
    known to ``domain/money.py``) says so, never passed off as the major unit."""
    if amount is None:
        return ""
    code = _fact(currency) or "(no currency)"
    if unit == "minor":
        return f"{amount} minor units of {code} (a currency whose decimals we do not know)"
    return f"{amount} {code}"


@dataclass(frozen=True)
class EarlierEvent:
    """One earlier event of the same person, as the model is told of it."""

    kind: str
    received_at: datetime
    page: str | None = None
    message: str | None = None
    amount: Decimal | None = None
    currency: str | None = None
    amount_unit: str | None = None


def _earlier_line(event: EarlierEvent, name: str | None) -> str:
    parts = [f"- {event.received_at:%Y-%m-%d}, {event.kind}"]
    if _page(event.page):
        parts.append(f"page {_page(event.page)}")
    paid = money_text(event.amount, event.currency, event.amount_unit)
    if paid:
        parts.append(f"paid {paid}")
    message = _without_name(event.message or "", name).strip()[:EARLIER_MESSAGE_MAX]
    if message:
        # A CRM Lead's description may hold our own summary: never passed off as their words.
        said = "the CRM Lead's description" if event.kind == "crm" else "message"
        parts.append(f"{said}: {' '.join(message.split())}")
    return ", ".join(parts)


def classification_text(
    lead: LeadIn,
    company: Mapping[str, object] | None = None,
    earlier: Sequence[EarlierEvent] = (),
) -> str:
    """The text sent about the person of ``lead``: their company, the page this event came from,
    a payment's amount and currency, the company facts of the lookup (``COMPANY_FACTS`` only),
    their earlier events (the newest ``EARLIER_MAX``, oldest first: what they wrote, paid, where
    from), and this event's message; e-mail addresses, phone numbers and IBANs masked everywhere
    and the person's own name taken out of the messages. Their name, e-mail address, phone and
    consent are not sent: they tell nothing of what the person wants."""
    lines = [
        f"Company (as the lead gave it): {_fact(lead.company) or 'not given'}",
        f"Page: {_page(lead.page) or 'not given'}",
    ]
    paid = money_text(lead.amount, lead.currency, lead.amount_unit)
    if paid:
        lines.append(f"Paid with this event: {paid}")
    facts = [(key, _fact((company or {}).get(key))) for key in COMPANY_FACTS]
    known = [f"- {key}: {value}" for key, value in facts if value]
    lines.append("Company facts (from a company lookup):")
    lines.extend(known or ["- none"])
    if earlier:
        lines.append("Earlier events of this person (oldest first):")
        lines.extend(_earlier_line(event, lead.name) for event in earlier[-EARLIER_MAX:])
    # ``LeadIn`` keeps a message printable, its lines and tabs included: sent as it is.
    message = _without_name(lead.message or "", lead.name).strip()
    lines.append("Message:")
    lines.append(message or "(no message)")
    return masked("\n".join(lines))
