"""The lead intake's last step, ``crm_upsert`` (docs/architecture.md §9): the product's one write
to the CRM, an EspoCRM ``Lead`` per person, sent the engine's one way (``engine/effects.py``);
its CRM part is ``crm_sender.py``.

One run at a time writes a person's Lead (a session advisory lock on the worker's connection,
held while the CRM is asked). The step reads the person's Lead (the one we wrote or read before,
else the oldest of the e-mail address) and plans the write from it: what a person typed in the
CRM wins (the person's attributes, the description and a payment's amount, ``domain/crm_lead.py``,
are only filled where empty; a classification value is only replaced while it still holds what
we wrote last, ``leads.crm_fields``). The write is the ledger action ``lead:{event_id}:crm_upsert``
on the run's database, stamped with the run's now and id: ``attempted`` is committed before the
request, ``accepted`` with the Lead's id after, in the transaction that records the step and
marks the event done. A lost answer leaves it ``unknown``; the retry leaves it alone within the
in-flight window, then the engine has the person's Lead searched before anything is sent, so the
Lead a lost create made is found and not made twice.

Kept here, beside the engine's sequence: a write of the same person by another event whose answer
was lost within the in-flight window holds this one back too (the engine's window is one
action's), and the write is never a dead letter of its own: its event is, retried and replayed
with its steps.

Shadow mode (lead intake's mode on record, ``store/lead_mode.py``, read before each write so that
a switch reaches a run in flight; implied by ``FOLLOWUP_DRY_RUN``) is the engine's ``shadow``: it
reads the CRM the same way and records what it would have written (the action ``suppressed``,
reason ``shadow``, or ``dry_run`` in a dry run; the write in its payload) for ``followup leads
compare``; it writes nothing. A live write whose answer was lost is settled by the search first;
one the CRM cannot tell of now is left for a live run.
"""

import sys
from collections import Counter
from datetime import datetime

from followup_pipeline.defs.lead_intake.crm_sender import (
    STEP,
    CrmLeadSender,
    LeadWrite,
    LeadWriter,
    action_key,
    person_lead,
)
from followup_pipeline.domain.crm_lead import LeadFacts, wanted_attributes
from followup_pipeline.engine.effects import Outbound, Sent
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.worker import ItemFailed, WorkerRun, completion_key
from followup_pipeline.integrations.errors import IntegrationError, PermanentError
from followup_pipeline.store import events, lead_mode
from followup_pipeline.store.events import Event
from followup_pipeline.store.lead_crm import (
    LeadForCrm,
    latest_classification,
    lead_for_crm,
    other_in_flight,
    try_lock,
    unlock,
)

#: Why a write waits for the in-flight window of a lost answer.
IN_FLIGHT = (
    "a write of this person lost its answer moments ago: the CRM is searched once the in-flight "
    "window ({window:.0f} s) has passed"
)
#: Attempts before a write would be a dead letter of its own: never; its event is one
#: (``actions_failed`` leaves ``crm_lead`` out), and a replay of the event writes again.
NEVER_DEAD = sys.maxsize


def _facts(lead: LeadForCrm) -> LeadFacts:
    return LeadFacts(
        email=lead.email,
        name=lead.name,
        company=lead.company,
        phone=lead.phone,
        first_source=lead.first_source,
        amount=lead.paid_amount,
        currency=lead.paid_currency,
    )


class CrmUpserter:
    """The ``crm_upsert`` step of the run's lead events: the worker's connection, the run's
    database and scope."""

    def __init__(self, run: WorkerRun, writer: LeadWriter, counts: Counter[str]) -> None:
        self.conn = run.conn
        self.db = run.db
        self.scope = run.scope
        self.settings = run.settings
        self.writer = writer
        self.counts = counts
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
        """Read the person's Lead, plan the write, and send it the engine's way."""
        window = self.settings.in_flight_s()
        with self.conn.transaction():
            lead = lead_for_crm(self.conn, lead_id)
            classification = latest_classification(self.conn, lead_id)
            mode = lead_mode.in_force(self.conn, self.settings).mode
            busy = other_in_flight(self.conn, lead_id=lead_id, event_id=event.id, window_s=window)
        self.modes.add(mode)
        if lead is None:
            raise ItemFailed(f"0:{STEP}", f"lead {lead_id} is gone", permanent=True)
        if busy:
            raise ItemFailed(f"0:{STEP}", IN_FLIGHT.format(window=window))
        try:
            current = person_lead(self.writer, lead)
        except IntegrationError as error:
            raise ItemFailed(f"0:{STEP}", f"CRM Lead search: {error}") from None
        s = self.settings
        wanted = wanted_attributes(
            _facts(lead), classification, s.lead_crm_fields, s.lead_crm_currencies
        )
        planned = LeadWrite(event.id, lead, current, wanted)
        sender = CrmLeadSender(self.writer, planned, self.counts)
        spec = planned.spec(now, mode)
        ledger = ActionLedger(
            self.db, self.scope.at(now), in_flight_s=window, max_attempts=NEVER_DEAD,
            dry_run=s.dry_run,
        )  # fmt: skip
        sent = Outbound(ledger).send(spec, sender, mode=mode)
        return self.ended(sender, sent, shadow=mode == "shadow")

    def ended(self, sender: CrmLeadSender, sent: Sent, *, shadow: bool) -> bool:
        """The step after the engine's send: recorded with the outcome (the sender's mirror),
        recorded here, or failed for a retry."""
        planned, state, error = sender.planned, sent.state, sent.error
        if state == "done":  # the CRM took it in an earlier attempt: the step alone is left
            with self.conn.transaction():
                sender.record(self.conn, sent.provider_ref, op="unchanged")
            return True
        if sent.reached or state == "suppressed":
            return True
        if state == "in_flight":
            raise ItemFailed(f"0:{STEP}", IN_FLIGHT.format(window=self.settings.in_flight_s()))
        if state == "unreadable" and shadow:
            # A live write's answer was lost before the switch to shadow, and the CRM cannot
            # tell now whether it took effect: left for a live run to settle.
            key = action_key(planned.event_id)
            self.scope.log.warning("shadow: %s may have reached the CRM; left: %s", key, error)
            return self.skip(planned.event_id, "lost_answer_left_for_live")
        if state == "unreadable":
            raise ItemFailed(f"0:{STEP}", f"CRM Lead search: {error}")
        if state == "failed":
            permanent = isinstance(error, PermanentError)
            raise ItemFailed(f"0:{STEP}", f"CRM Lead {planned.op}: {error}", permanent=permanent)
        raise ItemFailed(f"0:{STEP}", f"CRM Lead write: {state}")  # dead, off: not a lead's

    def skip(self, event_id: int, reason: str) -> bool:
        """The step done with nothing written."""
        with self.conn.transaction():
            step = completion_key(event_id, 0, STEP)
            events.complete(self.conn, key=step, event_id=event_id, result={"skipped": reason})
            events.mark_done(self.conn, event_id)
        self.counts[f"crm_skipped_{reason}"] += 1
        return True
