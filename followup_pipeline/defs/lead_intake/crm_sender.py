"""The CRM part of the lead intake's ``crm_upsert`` (``upsert.py``): one lead event's write of the
person's EspoCRM ``Lead``, as a ``Sender`` of the engine's one way out (``engine/effects.py``),
which runs the sequence around it.

- ``look_up`` (after a lost answer, once the in-flight window has passed): the person's Lead, the
  one we hold or else the oldest of the e-mail address. A CRM Lead carries no key of ours: it is
  found when it holds what the write wants (the lost request took effect), recorded ``accepted``
  as every CRM write is, "found by e-mail after a lost answer"; else the write goes again.
- ``perform``: nothing, when the Lead read before holds it all already (noted so); else update
  that Lead with what it lacks, or create one. A create refused by EspoCRM's duplicate check
  (409, with the duplicates) updates the duplicate of the same e-mail address; duplicates of the
  name alone are other people, and after one more search by the address the create is sent
  again past the check.
- ``read_back``: nothing more to read: EspoCRM answers an update or a create with the whole Lead.
- ``mirror``, in the ledger's transaction: the step's completion, the lead's CRM Lead (with when
  the CRM saved our write and the values it holds as ours) and the event done; for a write not
  sent (shadow mode, a dry run), what it would have been.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

import psycopg

from followup_pipeline.domain.crm_lead import Attributes, CrmLead, changes, held_as_ours
from followup_pipeline.engine.effects import ActionSpec, Mode, Performed, Sent
from followup_pipeline.engine.worker import completion_key
from followup_pipeline.integrations.errors import PermanentError
from followup_pipeline.integrations.espocrm_leads import Duplicates
from followup_pipeline.store import events
from followup_pipeline.store.lead_crm import LeadForCrm, set_crm_lead

STEP = "crm_upsert"
Op = Literal["create", "update", "unchanged"]
#: A run's count of each way a CRM write ended.
COUNTED: dict[str, str] = {
    "create": "crm_created",
    "update": "crm_updated",
    "unchanged": "crm_unchanged",
}
#: The note of a write that needed no request.
HELD = "the CRM's Lead holds it already"


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


def person_lead(writer: LeadWriter, lead: LeadForCrm) -> CrmLead | None:
    """The person's CRM Lead: the one we wrote or read before, else the oldest of the e-mail
    address; None when the CRM has none. Raises ``IntegrationError`` when the CRM cannot say."""
    if lead.crm_lead_id:
        known = writer.read(lead.crm_lead_id)
        if known is not None:
            return known
    found = writer.find_by_email(lead.email)
    return found[0] if found else None


def _same_email(record: CrmLead, email: str) -> bool:
    theirs = record.attributes.get("emailAddress")
    return str(theirs or "").strip().casefold() == email.casefold()


@dataclass(frozen=True)
class LeadWrite:
    """One lead event's CRM write, planned from the person's Lead as read before it (``current``,
    None when the CRM has none)."""

    event_id: int
    lead: LeadForCrm
    current: CrmLead | None
    wanted: Attributes

    @property
    def sending(self) -> Attributes:
        """What the request carries: everything for a create, what the Lead lacks for an update."""
        if self.current is None:
            return self.wanted
        return changes(self.wanted, self.current.attributes, self.lead.crm_fields)

    @property
    def op(self) -> Op:
        """What the write is to do."""
        if self.current is None:
            return "create"
        return "update" if self.sending else "unchanged"

    def spec(self, now: datetime, mode: Mode) -> ActionSpec:
        """The ledger action, with what ``followup leads compare`` reads in its payload."""
        payload: dict[str, object] = {
            "op": self.op,
            "crm_lead_id": self.current.id if self.current is not None else None,
            "attributes": self.sending,
            "wanted": self.wanted,
            "mode": mode,
        }
        return ActionSpec(
            key=action_key(self.event_id), kind="crm_lead", due_at=now, time_zone="UTC",
            payload=payload,
        )  # fmt: skip


class CrmLeadSender:
    """The CRM part of one lead event's write (the module's docstring)."""

    searchable = True
    searches_first = False
    #: A create whose answer was lost may have made the Lead.
    may_be_ambiguous = True
    #: A Lead found after a lost answer is recorded as a write the CRM answered is.
    found_outcome = "accepted"
    found_note = f"found by e-mail after a lost answer: {HELD}"

    def __init__(self, writer: LeadWriter, planned: LeadWrite, counts: Counter[str]) -> None:
        self.writer = writer
        self.planned = planned
        self.counts = counts
        #: The person's Lead as the outcome leaves it: as read before, as ``look_up`` found it,
        #: or as the CRM answered the request.
        self.lead_now = planned.current
        #: What the request did (a create refused as a duplicate may end an update, or nothing).
        self.done: Op = planned.op

    def look_up(self, spec: ActionSpec) -> str | None:
        """The person's Lead when it holds what the write wants already, else None."""
        planned = self.planned
        found = person_lead(self.writer, planned.lead)
        if found is None or changes(planned.wanted, found.attributes, planned.lead.crm_fields):
            return None
        self.lead_now = found
        return found.id

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> Performed:
        """Update or create the Lead (nothing, when it holds it all); its id."""
        current = self.planned.current
        if current is not None and self.planned.op == "unchanged":
            return Performed(current.id, HELD)  # no request: nothing in flight
        touch()
        record, self.done = self.write()
        self.lead_now = record
        return Performed(record.id, HELD if self.done == "unchanged" else None)

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Nothing more to read: the CRM answered with the whole Lead."""
        return None

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """The step's records of the outcome, in the ledger's transaction."""
        if sent.state == "suppressed":
            self.record_unsent(conn, spec)
        elif sent.state in ("sent", "found"):
            op = self.done if sent.state == "sent" else "unchanged"
            self.record(conn, sent.provider_ref, op=op, held=self.lead_now)
        # ``confirmed`` follows ``sent`` (recorded then); ``read_back`` reads nothing here.

    def write(self) -> tuple[CrmLead, Op]:
        """Send the update, or the create (answering EspoCRM's duplicate check); the Lead after
        it, and what was done."""
        planned = self.planned
        lead, current, wanted = planned.lead, planned.current, planned.wanted
        if current is not None:
            return self.writer.update(current.id, planned.sending), "update"
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
        crm_lead_id: str | None,
        *,
        op: Op,
        held: CrmLead | None = None,
    ) -> None:
        """The step's completion, the lead's CRM Lead (``held``: as the outcome leaves it, whose
        values of ours are kept; None: those kept before stay) and the event done, in the
        caller's transaction."""
        planned = self.planned
        if crm_lead_id is not None:
            written = held.modified_at if held is not None and op != "unchanged" else None
            ours = (
                held_as_ours(planned.wanted, held.attributes)
                if held is not None
                else planned.lead.crm_fields
            )
            set_crm_lead(conn, planned.lead.id, crm_lead_id, written, ours)
        key = completion_key(planned.event_id, 0, STEP)
        result = {"crm_lead_id": crm_lead_id, "op": op}
        events.complete(conn, key=key, event_id=planned.event_id, result=result)
        events.mark_done(conn, planned.event_id)
        self.counts[COUNTED[op]] += 1

    def record_unsent(self, conn: psycopg.Connection[Any], spec: ActionSpec) -> None:
        """The step done with what the write would have been; nothing was written."""
        key = completion_key(self.planned.event_id, 0, STEP)
        result = {"shadow": spec.payload}
        events.complete(conn, key=key, event_id=self.planned.event_id, result=result)
        events.mark_done(conn, self.planned.event_id)
        self.counts["crm_shadow"] += 1
