"""How a reminder reaches a learner: the vendor part of its send (a ``Sender`` of
``engine/effects.py``, which owns the rest) and its mirror on the reminder's record.

- ``MailReminder``: an e-mail from the tenant's mailbox through Graph, the key on the message (an
  extended property): looked up, and read back, in the mailbox (Sent Items, the Outbox).
- ``MoodleReminder``: Moodle's own message, the key's ``marker`` in its text and as its
  ``clientmsgid``: Moodle has no idempotency of its own, so the key is looked up, and read back,
  among the learner's newest messages. A refusal (``msgid`` -1: blocked, messaging off) fails
  the attempt; an answer that breaks its schema may have been a send (``unknown``).

A learner without an address (by e-mail) fails the attempt without a request, so that it ends a
dead letter after its attempts, parked with the owner, rather than retried for ever.
``ReminderBook`` keeps each outcome on the record (``lms_reminders``) and counts it:
``attempted`` as the request leaves; ``accepted`` (the assignment's latest successful action;
its queue item closed); ``confirmed``; ``failed`` or ``unknown``; ``suppressed`` with the reason
(its item closed).
"""

import hashlib
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

from followup_pipeline.defs.lms.outbound import FOUND, failure
from followup_pipeline.defs.lms.ports import LmsSite, Mailbox
from followup_pipeline.engine.effects import ActionSpec, Sent
from followup_pipeline.engine.late import settle_parked
from followup_pipeline.engine.scope import Database
from followup_pipeline.integrations.errors import PermanentError, SchemaError, TransientError
from followup_pipeline.store import lms
from followup_pipeline.store.lms import DueRow

#: What each reminder says first.
OPENING = {
    "before_due": "is due in two days",
    "due_day": "is due today",
    "overdue": "was due and is still open",
}
#: Why a reminder by e-mail cannot be sent to a learner.
NO_ADDRESS = "the learner has no e-mail address in Moodle"


def marker(key: str) -> str:
    """A short mark of ``key`` carried in a Moodle message (and as its ``clientmsgid``)."""
    return "fu-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def message_text(row: DueRow, zone: str) -> tuple[str, str]:
    """The reminder's subject and text."""
    due = ""
    if row.quiz_due_at is not None:
        due = f" (due {row.quiz_due_at.astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M %Z})"
    subject = f"Reminder: {row.quiz_name} {OPENING.get(row.action_type, 'is open')}"
    who = row.learner_name or "there"
    text = (
        f"Hello {who},\n\nthe quiz {row.quiz_name}{due} {OPENING.get(row.action_type, '')}. "
        "Please complete it in the academy.\n\nref " + marker(row.idempotency_key)
    )
    return subject, text


@dataclass(frozen=True)
class ReminderBook:
    """The records of one tenant's reminders in one run, and the run's counts of them."""

    db: Database
    now: datetime
    counts: Counter[str]

    def mark(self, row: DueRow, outcome: str, *, reason: str | None = None) -> None:
        """Record where the reminder stands, on its own."""
        with self.db.connection() as conn, conn.transaction():
            self.record(conn, row, outcome, reason=reason)

    def record(
        self, conn: psycopg.Connection[Any], row: DueRow, outcome: str, *, reason: str | None = None
    ) -> None:
        """Record where the reminder stands, in the caller's transaction, and count it."""
        key, now = row.idempotency_key, self.now
        lms.settle(conn, row.id, outcome, reason=reason, at=now)
        if outcome == "suppressed":
            settle_parked(conn, key, f"suppressed: {reason}", at=now)
            self.counts[f"suppressed_{reason}"] += 1
            return
        if outcome == "accepted":
            settle_parked(conn, key, "sent: accepted", at=now)
            lms.mark_succeeded(conn, row.tenant_id, row.learner_id, row.assignment_id, now)
        self.counts[f"reminders_{outcome}"] += 1


class ReminderSender(ABC):
    """What both channels share: the reminder, its zone, its record; searched by the key."""

    searchable = True
    searches_first = False
    may_be_ambiguous = True
    #: How a look-up's find after a lost answer is recorded (the engine's ``confirmed``).
    found_note = FOUND

    def __init__(self, row: DueRow, zone: str, book: ReminderBook) -> None:
        self.row = row
        self.zone = zone
        self.book = book

    @abstractmethod
    def look_up(self, spec: ActionSpec) -> str | None:
        """The provider's id of the message carrying the key."""

    @abstractmethod
    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Send the message (calling ``touch`` as the request leaves); the provider's id."""

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Whether the provider shows the message: its look-up by the key."""
        return self.look_up(spec) is not None

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """The outcome on the reminder's record."""
        if sent.state == "suppressed":
            self.book.record(conn, self.row, "suppressed", reason=sent.reason)
        else:
            self.book.record(
                conn, self.row, "confirmed" if sent.state == "confirmed" else "accepted"
            )

    def failed(self, sent: Sent) -> None:
        """A send that failed: ``unknown`` when it may have gone, else ``failed``."""
        self.book.mark(self.row, failure(self, sent))


class MailReminder(ReminderSender):
    """A reminder by e-mail from the tenant's mailbox (None: the tenant has none)."""

    def __init__(self, row: DueRow, zone: str, book: ReminderBook, mailbox: Mailbox | None) -> None:
        super().__init__(row, zone, book)
        self.mailbox = mailbox

    def look_up(self, spec: ActionSpec) -> str | None:
        return self.mailbox.find_sent(spec.key) if self.mailbox is not None else None

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Send the mail; Graph's request id."""
        address = self.row.learner_email
        if self.mailbox is None or not address:
            raise PermanentError(NO_ADDRESS, vendor="graph")
        subject, text = message_text(self.row, self.zone)
        html = "".join(f"<p>{escape(part, quote=False)}</p>" for part in text.split("\n\n"))
        self.book.mark(self.row, "attempted")
        touch()
        receipt = self.mailbox.send_mail(to=[address], subject=subject, html=html, key=spec.key)
        return receipt.request_id


class MoodleReminder(ReminderSender):
    """A reminder as Moodle's own message to the learner."""

    def __init__(self, row: DueRow, zone: str, book: ReminderBook, site: LmsSite) -> None:
        super().__init__(row, zone, book)
        self.site = site

    def look_up(self, spec: ActionSpec) -> str | None:
        found = self.site.find_message(self.row.learner_id, marker(spec.key))
        return str(found.id) if found is not None else None

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Send the message; Moodle's id of it."""
        _, text = message_text(self.row, self.zone)
        self.book.mark(self.row, "attempted")
        touch()
        try:
            answer = self.site.send_message(self.row.learner_id, text, marker(spec.key))
        except SchemaError as error:  # a 2xx we cannot read: it may have gone
            raise TransientError(
                f"the answer to a send broke its schema ({error.field}: {error.problem})",
                vendor=error.vendor, ambiguous=True,
            ) from error  # fmt: skip
        if answer.msgid < 0:
            raise PermanentError(f"refused: {answer.errormessage}", vendor="moodle")
        return str(answer.msgid)
