"""The lead intake's last step, ``crm_upsert`` (docs/architecture.md §9): the product's one write
to the CRM, an EspoCRM ``Lead`` per person.

Search first (the Lead we wrote or read before, else the Leads of the e-mail address), then
update the one found with what it lacks, or create one. The write is a ledger action keyed
``lead:{event_id}:crm_upsert``: ``attempted`` is committed before the request, ``accepted`` with
the Lead's id after, in the transaction that records the step and marks the event done. An answer
that was lost leaves it ``unknown``; the retry waits out the in-flight window, then searches
before anything else, so the Lead the lost create made is found and not made twice. A create
refused by EspoCRM's duplicate check (409, with the duplicates) updates the duplicate of the same
e-mail address; duplicates of the name alone are other people, and the create is sent again
past the check.

Shadow mode (``FOLLOWUP_LEAD_INTAKE_MODE=shadow``, implied by ``FOLLOWUP_DRY_RUN``) reads the CRM
the same way and records what it would have written (the action ``suppressed``, reason
``shadow``, the write in its payload) for ``followup leads compare``; it writes nothing.
"""

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import psycopg

from followup_pipeline.domain.crm_lead import LeadFacts, changes, wanted_attributes
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.engine.worker import ItemFailed, completion_key
from followup_pipeline.integrations.errors import IntegrationError, PermanentError, TransientError
from followup_pipeline.integrations.espocrm_leads import Duplicates
from followup_pipeline.settings import Settings
from followup_pipeline.store import events
from followup_pipeline.store import ledger as rows
from followup_pipeline.store.events import Event
from followup_pipeline.store.lead_crm import (
    LeadForCrm,
    latest_classification,
    lead_for_crm,
    set_crm_lead,
)

STEP = "crm_upsert"
LOG = logging.getLogger(__name__)
Op = Literal["create", "update", "unchanged"]


class LeadWriter(Protocol):
    """What ``crm_upsert`` needs of the CRM: its Leads, and nothing else."""

    def find_by_email(self, email: str) -> list[dict[str, Any]]:
        """The Leads of an e-mail address, oldest first."""
        ...

    def read(self, lead_id: str) -> dict[str, Any] | None:
        """One Lead, None when it is gone."""
        ...

    def create(
        self, attributes: dict[str, Any], *, skip_duplicate_check: bool = False
    ) -> dict[str, Any] | Duplicates:
        """A new Lead, or the duplicates EspoCRM's check found."""
        ...

    def update(self, lead_id: str, attributes: dict[str, Any]) -> dict[str, Any]:
        """The Lead with ``attributes`` changed."""
        ...


def action_key(event_id: int) -> str:
    """The ledger key of an event's CRM write."""
    return f"lead:{event_id}:{STEP}"


class _OneConnection:
    """The worker's connection as the ledger's ``Database``: the step's writes and the ledger's
    share it (the worker holds no transaction open between them)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        yield self.conn


def _modified_at(record: dict[str, Any]) -> datetime | None:
    """A Lead's ``modifiedAt`` (EspoCRM's UTC ``YYYY-MM-DD HH:MM:SS``), None if unreadable."""
    try:
        moment = datetime.fromisoformat(str(record.get("modifiedAt")))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _same_email(record: dict[str, Any], email: str) -> bool:
    return str(record.get("emailAddress") or "").strip().casefold() == email.casefold()


class CrmUpserter:
    """The ``crm_upsert`` step of one lead event."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        writer: LeadWriter,
        settings: Settings,
        counts: Counter[str],
    ) -> None:
        self.conn = conn
        self.writer = writer
        self.settings = settings
        self.counts = counts

    def run(self, event: Event, lead_id: int, *, now: datetime) -> bool:
        """Write (or in shadow, record) the event's lead to the CRM; mark the event done."""
        key = action_key(event.id)
        with self.conn.transaction():
            lead = lead_for_crm(self.conn, lead_id)
            classification = latest_classification(self.conn, lead_id)
        if lead is None:
            raise ItemFailed(f"0:{STEP}", f"lead {lead_id} is gone", permanent=True)
        if event.source == "crm-changes" and lead.crm_written_at is not None:
            # A person's edit in the CRM of a Lead we wrote: theirs is the newest word.
            return self.skip(event, "crm_edit")
        ledger = ActionLedger(
            _OneConnection(self.conn),
            RunScope(now, None, LOG),
            in_flight_s=self.settings.in_flight_s(),
            max_attempts=self.settings.event_attempts(event.source),
            # Never reached in a dry run (shadow mode is implied, above): the ledger's door
            # stays shut all the same.
            dry_run=self.settings.dry_run,
        )
        prior = ledger.prior(key)
        if prior.done and prior.action is not None:
            return self.finish(event, lead, prior.action.provider_ref, None, op="unchanged")
        if ledger.in_flight(prior):
            raise ItemFailed(
                f"0:{STEP}",
                "an earlier write's answer was lost moments ago: the CRM is searched once the "
                f"in-flight window ({self.settings.in_flight_s():.0f} s) has passed",
            )
        facts = LeadFacts(
            email=lead.email,
            name=lead.name,
            company=lead.company,
            phone=lead.phone,
            first_source=lead.first_source,
        )
        wanted = wanted_attributes(facts, classification, self.settings.lead_crm_fields)
        current = self.look(lead)
        op: Op = "create" if current is None else "update"
        sending = wanted if current is None else changes(wanted, current)
        if current is not None and not sending:
            op = "unchanged"
        spec = rows.ActionSpec(
            key=key,
            kind="crm_lead",
            due_at=now,
            time_zone="UTC",
            payload={
                "op": op,
                "crm_lead_id": current["id"] if current is not None else None,
                "attributes": sending,
                "mode": "shadow" if self.settings.lead_shadow() else "live",
            },
        )
        if self.settings.lead_shadow():
            return self.shadow(event, spec)
        if current is not None and op == "unchanged":
            note = "the CRM's Lead holds it already"
            if prior.maybe_done:
                note = "found by e-mail after a lost answer: " + note
            ledger.found(spec, provider_ref=str(current["id"]), note=note)
            return self.finish(event, lead, str(current["id"]), None, op=op)
        attempt = ledger.begin(spec)
        if attempt is None:  # another run recorded it meanwhile
            return self.finish(event, lead, None, None, op="unchanged")
        ledger.touch(attempt)
        try:
            record = self.write(lead.email, current, sending, wanted)
        except IntegrationError as error:
            ambiguous = isinstance(error, TransientError) and error.ambiguous
            ledger.fail(attempt, str(error)[:500], maybe_done=ambiguous)
            raise ItemFailed(
                f"0:{STEP}",
                f"CRM Lead {op}: {error}",
                permanent=isinstance(error, PermanentError),
            ) from None
        ref = str(record["id"])

        def also(conn: psycopg.Connection[Any]) -> None:
            self.record(conn, event, lead, ref, _modified_at(record), op=op)

        ledger.finish(attempt, "accepted", provider_ref=ref, also=also)
        return True

    def look(self, lead: LeadForCrm) -> dict[str, Any] | None:
        """The person's CRM Lead: the one we wrote or read before, else the oldest of the
        e-mail address; None when the CRM has none."""
        try:
            if lead.crm_lead_id:
                known = self.writer.read(lead.crm_lead_id)
                if known is not None:
                    return known
            found = self.writer.find_by_email(lead.email)
        except IntegrationError as error:
            raise ItemFailed(f"0:{STEP}", f"CRM Lead search: {error}") from None
        return found[0] if found else None

    def write(
        self,
        email: str,
        current: dict[str, Any] | None,
        sending: dict[str, Any],
        wanted: dict[str, Any],
    ) -> dict[str, Any]:
        """Send the update, or the create (answering EspoCRM's duplicate check)."""
        if current is not None:
            return self.writer.update(str(current["id"]), sending)
        created = self.writer.create(wanted)
        if not isinstance(created, Duplicates):
            self.counts["crm_created"] += 1
            return created
        same = [record for record in created.found if _same_email(record, email)]
        if same:
            # The person is in the CRM already (created since our search): theirs, updated.
            self.counts["crm_duplicate_found"] += 1
            target = same[0]
            missing = changes(wanted, target)
            return self.writer.update(str(target["id"]), missing) if missing else target
        # Duplicates by name only: other people of the same name; the e-mail is the person.
        self.counts["crm_created"] += 1
        created = self.writer.create(wanted, skip_duplicate_check=True)
        if isinstance(created, Duplicates):  # pragma: no cover (the check was skipped)
            raise PermanentError("duplicate check answered though skipped", vendor="espocrm")
        return created

    def record(
        self,
        conn: psycopg.Connection[Any],
        event: Event,
        lead: LeadForCrm,
        crm_lead_id: str | None,
        written_at: datetime | None,
        *,
        op: Op,
    ) -> None:
        """The step's completion, the lead's CRM Lead, and the event done (one transaction)."""
        if crm_lead_id is not None:
            set_crm_lead(conn, lead.id, crm_lead_id, written_at)
        result = {"crm_lead_id": crm_lead_id, "op": op}
        events.complete(
            conn, key=completion_key(event.id, 0, STEP), event_id=event.id, result=result
        )
        events.mark_done(conn, event.id)
        self.counts[f"crm_{op}" if op != "create" else "crm_written"] += 1

    def finish(
        self,
        event: Event,
        lead: LeadForCrm,
        crm_lead_id: str | None,
        written_at: datetime | None,
        *,
        op: Op,
    ) -> bool:
        """Record the step without a write of its own."""
        with self.conn.transaction():
            self.record(self.conn, event, lead, crm_lead_id, written_at, op=op)
        return True

    def shadow(self, event: Event, spec: rows.ActionSpec) -> bool:
        """Record what the write would have been; write nothing."""
        with self.conn.transaction():
            rows.suppress(self.conn, spec, reason="shadow")
            result = {"shadow": spec.payload}
            step = completion_key(event.id, 0, STEP)
            events.complete(self.conn, key=step, event_id=event.id, result=result)
            events.mark_done(self.conn, event.id)
        self.counts["crm_shadow"] += 1
        return True

    def skip(self, event: Event, reason: str) -> bool:
        """The step done with nothing to write."""
        with self.conn.transaction():
            step = completion_key(event.id, 0, STEP)
            events.complete(self.conn, key=step, event_id=event.id, result={"skipped": reason})
            events.mark_done(self.conn, event.id)
        self.counts[f"crm_skipped_{reason}"] += 1
        return True
