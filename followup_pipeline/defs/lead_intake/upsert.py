"""The lead intake's last step, ``crm_upsert`` (docs/architecture.md §9): the product's one write
to the CRM, an EspoCRM ``Lead`` per person.

Search first (the Lead we wrote or read before, else the Leads of the e-mail address), then
update the one found with what it lacks, or create one. What a person typed in the CRM wins: the
person's attributes, the description and a payment's amount (``domain/crm_lead.py``) are only
filled where empty, and a classification value is only replaced while it still holds what we
wrote last (``leads.crm_fields``). The write is a ledger action keyed
``lead:{event_id}:crm_upsert``: ``attempted`` is committed before the request, ``accepted`` with
the Lead's id after, in the transaction that records the step and marks the event done. An
answer that was lost leaves it ``unknown``; the retry waits out the in-flight window (also when
another event of the same person lost its answer), then searches before anything else, so the
Lead the lost create made is found and not made twice. One run at a time
writes a person's Lead (a session advisory lock). A create refused by EspoCRM's duplicate check
(409, with the duplicates) updates the duplicate of the same e-mail address; duplicates of the
name alone are other people, and after one more search by the address the create is sent again
past the check.

Shadow mode (lead intake's mode on record, ``store/lead_mode.py``: where every installation
starts; implied by ``FOLLOWUP_DRY_RUN``) reads the CRM the same way and records what it would
have written (the action ``suppressed``, reason ``shadow``, the write in its payload) for
``followup leads compare``; it writes nothing, and leaves a live write whose answer was lost to a
live run.
"""

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal, Protocol

import psycopg

from followup_pipeline.domain.crm_lead import (
    Attributes,
    CrmLead,
    LeadFacts,
    changes,
    held_as_ours,
    wanted_attributes,
)
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.engine.worker import ItemFailed, completion_key
from followup_pipeline.integrations.errors import IntegrationError, PermanentError, TransientError
from followup_pipeline.integrations.espocrm_leads import Duplicates
from followup_pipeline.settings import Settings
from followup_pipeline.store import events, lead_mode
from followup_pipeline.store import ledger as rows
from followup_pipeline.store.events import Event
from followup_pipeline.store.lead_crm import (
    LeadForCrm,
    latest_classification,
    lead_for_crm,
    other_in_flight,
    set_crm_lead,
    try_lock,
    unlock,
)

STEP = "crm_upsert"
LOG = logging.getLogger(__name__)
Op = Literal["create", "update", "unchanged"]
#: A run's count of each way a CRM write ended.
COUNTED: dict[str, str] = {
    "create": "crm_created",
    "update": "crm_updated",
    "unchanged": "crm_unchanged",
}


class LeadWriter(Protocol):
    """What ``crm_upsert`` needs of the CRM: its Leads, and nothing else."""

    def find_by_email(self, email: str) -> list[CrmLead]:
        """The Leads of an e-mail address, oldest first."""
        ...

    def read(self, lead_id: str) -> CrmLead | None:
        """One Lead, None when it is gone."""
        ...

    def create(
        self, attributes: Attributes, *, skip_duplicate_check: bool = False
    ) -> CrmLead | Duplicates:
        """A new Lead, or the duplicates EspoCRM's check found."""
        ...

    def update(self, lead_id: str, attributes: Attributes) -> CrmLead:
        """The Lead with ``attributes`` changed."""
        ...


def action_key(event_id: int) -> str:
    """The ledger key of an event's CRM write."""
    return f"lead:{event_id}:{STEP}"


class _OneConnection:
    """The worker's connection as the ledger's ``Database``: each use is one transaction of its
    own, committed at once (the worker holds none open between them), so ``attempted`` is on
    record before the request leaves."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self.conn.transaction():
            yield self.conn


def _same_email(record: CrmLead, email: str) -> bool:
    theirs = record.attributes.get("emailAddress")
    return str(theirs or "").strip().casefold() == email.casefold()


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
        #: Lead intake's mode for the write at hand (``store/lead_mode.py``), read before each
        #: write so that a switch reaches a run in flight: True writes nothing.
        self.shadow = True
        #: The modes this run's writes were made in.
        self.modes: set[str] = set()

    def run(self, event: Event, lead_id: int, *, now: datetime) -> bool:
        """Write (or in shadow, record) the event's lead to the CRM; mark the event done. One
        run at a time writes a person's Lead (a session lock, held while the CRM is asked)."""
        if not try_lock(self.conn, lead_id):
            raise ItemFailed(f"0:{STEP}", "another run is writing this person's CRM Lead now")
        try:
            return self.upsert(event, lead_id, now=now)
        finally:
            unlock(self.conn, lead_id)

    def upsert(self, event: Event, lead_id: int, *, now: datetime) -> bool:
        """Search, then update, create or record nothing; see the module's docstring."""
        key = action_key(event.id)
        with self.conn.transaction():
            lead = lead_for_crm(self.conn, lead_id)
            classification = latest_classification(self.conn, lead_id)
            mode = lead_mode.in_force(self.conn, self.settings).mode
        self.shadow = mode == "shadow"
        self.modes.add(mode)
        if lead is None:
            raise ItemFailed(f"0:{STEP}", f"lead {lead_id} is gone", permanent=True)
        ledger = ActionLedger(
            _OneConnection(self.conn),
            RunScope(now, None, LOG),
            in_flight_s=self.settings.in_flight_s(),
            max_attempts=self.settings.event_attempts(event.source),
            # Never reached in a dry run (shadow mode is implied, below): the ledger's door
            # stays shut all the same.
            dry_run=self.settings.dry_run,
        )
        prior = ledger.prior(key)
        if prior.done and prior.action is not None:
            return self.finish(event, lead, prior.action.provider_ref, op="unchanged")
        window = self.settings.in_flight_s()
        with self.conn.transaction():
            busy = other_in_flight(self.conn, lead_id=lead_id, event_id=event.id, window_s=window)
        if ledger.in_flight(prior) or busy:
            raise ItemFailed(
                f"0:{STEP}",
                "a write of this person lost its answer moments ago: the CRM is searched once "
                f"the in-flight window ({window:.0f} s) has passed",
            )
        if self.shadow and prior.maybe_done:
            # A live write's answer was lost before the switch to shadow: left for a live run
            # to settle, as the ledger leaves one in a dry run.
            LOG.warning("shadow: %s may have reached the CRM before; left as it is", key)
            return self.skip(event, "lost_answer_left_for_live")
        facts = LeadFacts(
            email=lead.email,
            name=lead.name,
            company=lead.company,
            phone=lead.phone,
            first_source=lead.first_source,
            amount=lead.paid_amount,
            currency=lead.paid_currency,
        )
        wanted = wanted_attributes(
            facts,
            classification,
            self.settings.lead_crm_fields,
            self.settings.lead_crm_currencies,
        )
        current = self.look(lead)
        sending = (
            wanted if current is None else changes(wanted, current.attributes, lead.crm_fields)
        )
        op: Op = "create" if current is None else ("update" if sending else "unchanged")
        spec = rows.ActionSpec(
            key=key,
            kind="crm_lead",
            due_at=now,
            time_zone="UTC",
            payload={
                "op": op,
                "crm_lead_id": current.id if current is not None else None,
                "attributes": sending,
                "wanted": wanted,
                "mode": "shadow" if self.shadow else "live",
            },
        )
        if self.shadow:
            return self.record_shadow(event, spec)
        if current is not None and op == "unchanged":
            note = "the CRM's Lead holds it already"
            if prior.maybe_done:
                note = "found by e-mail after a lost answer: " + note
            ledger.found(spec, provider_ref=current.id, note=note)
            ours = held_as_ours(wanted, current.attributes)
            return self.finish(event, lead, current.id, op=op, ours=ours)
        attempt = ledger.begin(spec)
        if attempt is None:  # another run recorded it meanwhile
            return self.finish(event, lead, None, op="unchanged")
        ledger.touch(attempt)
        try:
            record, op = self.write(lead, current, sending, wanted)
        except IntegrationError as error:
            ambiguous = isinstance(error, TransientError) and error.ambiguous
            ledger.fail(attempt, str(error)[:500], maybe_done=ambiguous)
            raise ItemFailed(
                f"0:{STEP}",
                f"CRM Lead {op}: {error}",
                permanent=isinstance(error, PermanentError),
            ) from None
        ref = record.id
        written = record.modified_at if op != "unchanged" else None
        ours = held_as_ours(wanted, record.attributes)

        def also(conn: psycopg.Connection[Any]) -> None:
            self.record(conn, event, lead, ref, op=op, written_at=written, ours=ours)

        ledger.finish(attempt, "accepted", provider_ref=ref, also=also)
        return True

    def look(self, lead: LeadForCrm) -> CrmLead | None:
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
        lead: LeadForCrm,
        current: CrmLead | None,
        sending: Attributes,
        wanted: Attributes,
    ) -> tuple[CrmLead, Op]:
        """Send the update, or the create (answering EspoCRM's duplicate check); the Lead
        after it, and what was done."""
        if current is not None:
            return self.writer.update(current.id, sending), "update"
        created = self.writer.create(wanted)
        if not isinstance(created, Duplicates):
            return created, "create"
        same = [record for record in created.found if _same_email(record, lead.email)]
        if not same:
            # The duplicates may not show their address: ask again by it before concluding
            # they are other people of the same name.
            same = self.writer.find_by_email(lead.email)
        if same:
            # The person is in the CRM already (created since our search): theirs, updated.
            self.counts["crm_duplicate_found"] += 1
            target = same[0]
            missing = changes(wanted, target.attributes, lead.crm_fields)
            if not missing:
                return target, "unchanged"
            return self.writer.update(target.id, missing), "update"
        # Duplicates by name only: other people of the same name; the e-mail is the person.
        created = self.writer.create(wanted, skip_duplicate_check=True)
        if isinstance(created, Duplicates):  # pragma: no cover (the check was skipped)
            raise PermanentError("duplicate check answered though skipped", vendor="espocrm")
        return created, "create"

    def record(
        self,
        conn: psycopg.Connection[Any],
        event: Event,
        lead: LeadForCrm,
        crm_lead_id: str | None,
        *,
        op: Op,
        written_at: datetime | None = None,
        ours: Attributes | None = None,
    ) -> None:
        """The step's completion, the lead's CRM Lead, and the event done (one transaction)."""
        if crm_lead_id is not None:
            held = lead.crm_fields if ours is None else ours
            set_crm_lead(conn, lead.id, crm_lead_id, written_at, held)
        result = {"crm_lead_id": crm_lead_id, "op": op}
        events.complete(
            conn, key=completion_key(event.id, 0, STEP), event_id=event.id, result=result
        )
        events.mark_done(conn, event.id)
        self.counts[COUNTED[op]] += 1

    def finish(
        self,
        event: Event,
        lead: LeadForCrm,
        crm_lead_id: str | None,
        *,
        op: Op,
        ours: Attributes | None = None,
    ) -> bool:
        """Record the step without a write of its own."""
        with self.conn.transaction():
            self.record(self.conn, event, lead, crm_lead_id, op=op, ours=ours)
        return True

    def record_shadow(self, event: Event, spec: rows.ActionSpec) -> bool:
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
