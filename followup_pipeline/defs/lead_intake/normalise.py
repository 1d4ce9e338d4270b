"""The lead intake's first step, ``normalise``: one claimed event of a lead source becomes one
person's lead (docs/architecture.md §9).

The worker (``engine/worker.py``) claims, charges attempts, backs off with jitter and dead-letters;
this handler parses the event's body into a ``LeadIn`` and writes it, with the step's completion
key ``{event_id}:0:normalise`` and the event marked done, in one transaction: a retry or a replay
under the original id finds the key and writes nothing twice. A body that makes no lead (a field
missing or wrong) is a dead letter at once, naming the field; a payment event that is no paid
checkout, and a CRM Lead without an e-mail address, are done and counted ``ignored``.
"""

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from followup_pipeline.domain.leads import (
    LeadIn,
    LeadRejected,
    from_crm_lead,
    from_payment,
    from_site_form,
)
from followup_pipeline.engine.worker import ItemFailed, ResourcesByKey, completion_key
from followup_pipeline.settings import Settings
from followup_pipeline.store import events, leads
from followup_pipeline.store.events import Event

STEP = "normalise"


class LeadNormaliser:
    """The handler of the lead sources' events, for the engine's worker (and a replay)."""

    def __init__(self, conn: psycopg.Connection[Any], settings: Settings) -> None:
        self.conn = conn
        self.counts: Counter[str] = Counter()
        fields = settings.site_form_fields
        self.parsers: Mapping[str, Callable[[bytes], LeadIn | None]] = {
            "site-form": lambda body: from_site_form(body, fields),
            "payment": from_payment,
            "crm-changes": from_crm_lead,
        }

    def handle(self, event: Event, done: set[str]) -> bool:
        """Write the event's lead and mark it done in one transaction; True when it did."""
        key = completion_key(event.id, 0, STEP)
        self.counts["received"] += 1
        if key in done:
            self.counts["already_done"] += 1
            return False  # the worker marks it done
        body = bytes(event.body) if event.body is not None else b""
        parser = self.parsers.get(event.source)
        if parser is None:
            raise ItemFailed("source", f"no lead parser for {event.source!r}", permanent=True)
        try:
            lead = parser(body)
        except LeadRejected as rejected:
            self.counts["rejected"] += 1
            raise ItemFailed(
                f"0:{STEP}", f"{event.source} body: {rejected}", permanent=True
            ) from None
        if lead is None:
            self.counts["ignored"] += 1
            return False
        row = leads.LeadRow(
            email=lead.email,
            source=event.source,
            kind=lead.kind,
            at=event.received_at,
            name=lead.name,
            company=lead.company,
            phone=lead.phone,
            consent=lead.consent,
            amount=lead.amount,
            currency=lead.currency,
            page=lead.page,
            message=lead.message,
            crm_lead_id=lead.crm_lead_id,
        )
        with self.conn.transaction():
            linked = leads.link_event(self.conn, event_id=event.id, lead=row)
            result = {"lead_id": linked.lead_id, "created": linked.created}
            events.complete(self.conn, key=key, event_id=event.id, result=result)
            events.mark_done(self.conn, event.id)
        self.counts["normalised"] += 1
        self.counts["new_leads" if linked.created else "duplicates"] += 1
        return True


def make_normaliser(
    conn: psycopg.Connection[Any], settings: Settings, resources: ResourcesByKey
) -> LeadNormaliser:
    """The lead sources' handler (it needs no vendor: the body says everything)."""
    return LeadNormaliser(conn, settings)
