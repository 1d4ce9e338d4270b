"""The nightly ``crm_changes`` sweep: EspoCRM Leads created or modified since the stored cursor,
each stored in the event log as an event of source ``crm-changes`` (docs/architecture.md §9), so
a lead typed into the CRM by hand goes through the same pipeline as a form's.

Each version of a Lead is one delivery, its id ``{lead id}@{modifiedAt}``: a listing that reads a
record twice (the cursor's overlap, a rerun) stores it once, and a lead edited later is a new
event of the same person (one lead still). A version this product wrote itself is recognised by
the CRM's ``modifiedAt`` that our write got back (``leads.crm_written_at``), not by a guess, and
left out; a later edit by a person is read. A record that breaks its schema is stored as a dead
letter with its raw record (replayable once the cause is fixed). The cursor moves to the newest
``modifiedAt`` read, only after the listing was read (a CRM error leaves it where it was).
"""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from followup_pipeline.engine.scope import Database, RunScope, Tally
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.espocrm_models import Lead, Listing
from followup_pipeline.store import events, leads
from followup_pipeline.store.enrichments import cursor_of, set_cursor

SOURCE = "crm-changes"
CURSOR = "crm_changes"
#: Read a little before the cursor: a record saved while the last listing ran is not missed.
OVERLAP = timedelta(minutes=10)
#: How far back the very first sweep reads.
FIRST_SWEEP = timedelta(days=1)


class LeadSource(Protocol):
    """What the sweep needs of the CRM."""

    def list_leads_since(self, *, since: datetime) -> Listing[Lead]:
        """Every Lead modified after ``since``."""
        ...


@dataclass(frozen=True)
class Swept:
    """What one sweep did: its counts and problems, and whether it read the CRM at all."""

    tally: Tally
    complete: bool


def sweep(run: RunScope, db: Database, crm: LeadSource) -> Swept:
    """Store every Lead changed since the cursor as an event; move the cursor."""
    tally = Tally(run.log)
    with db.connection() as conn:
        position = cursor_of(conn, CURSOR)
    since = position - OVERLAP if position is not None else run.now - FIRST_SWEEP
    try:
        listing = crm.list_leads_since(since=since)
    except IntegrationError as error:
        tally.problem(f"CRM leads unreadable, the cursor stays: {error}", error)
        return Swept(tally, complete=False)
    tally.count("crm_leads_changed", len(listing.records) + len(listing.invalid))
    for broken in listing.invalid:
        # Kept where an operator sees it (a dead letter with its raw record, replayable), not
        # dropped, and not holding the cursor back for ever.
        tally.problem(f"CRM lead breaks its schema, kept as a dead letter: {broken}")
        raw = broken.raw if isinstance(broken.raw, dict) else {"raw": repr(broken.raw)}
        with db.connection() as conn:
            events.store_delivery(
                conn,
                source=SOURCE,
                event_type="Lead.changed",
                body=json.dumps(raw, default=str).encode(),
                headers={},
                status="dead",
                error=f"CRM lead breaks its schema: {broken}",
                # Without both, no id: the body's hash recognises a second read.
                delivery_id=(
                    f"{raw['id']}@{raw['modifiedAt']}"
                    if raw.get("id") and raw.get("modifiedAt")
                    else None
                ),
                received_at=run.now,
            )
        tally.count("invalid")
    newest = position
    for lead in listing.records:
        newest = lead.modified_at if newest is None else max(newest, lead.modified_at)
        with db.connection() as conn:
            if leads.written_by_us(conn, lead.id, lead.modified_at):
                tally.count("ours")
                continue
            body = json.dumps(lead.model_dump(by_alias=True, mode="json")).encode()
            stored = events.store_delivery(
                conn,
                source=SOURCE,
                event_type="Lead.changed",
                body=body,
                headers={},
                delivery_id=f"{lead.id}@{lead.modified_at.isoformat()}",
                received_at=run.now,
            )
        tally.count("duplicates" if stored.duplicate else "stored")
    if newest is not None:
        with db.connection() as conn:
            set_cursor(conn, CURSOR, newest)
    return Swept(tally, complete=True)
