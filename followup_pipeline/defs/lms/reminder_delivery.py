"""How a reminder reaches a learner: the vendor part of its send (a ``Sender`` of
``engine/effects.py``, which owns the rest) and its mirror on the reminder's record.

What the learner reads comes from templates in their language and zone (``Letters``,
``domain/academy_mail.py``), with the quiz's link and their own signed opt-out link; nothing
internal is shown to them.

- ``MailReminder``: an e-mail from the tenant's mailbox through Graph's MIME ``sendMail``, with a
  one-click opt-out (``List-Unsubscribe``, RFC 8058) and the key in an ``X-Followup-Key`` header:
  looked up, and read back, in the mailbox (Sent Items, the Outbox) by that header's property.
- ``MoodleReminder``: Moodle's own message, its key's ``marker`` as its ``clientmsgid``; Moodle
  has no idempotency of its own and does not give a ``clientmsgid`` back, so the message is
  looked up, and read back, among the learner's newest by its opt-out link's id (in its text).
  A refusal (``msgid`` -1: blocked, messaging off) fails the attempt; an answer that breaks its
  schema may have been a send (``unknown``).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.defs.lms.outbound import FOUND, failure
from followup_pipeline.defs.lms.ports import LmsSite, Mailbox
from followup_pipeline.domain import links as signed
from followup_pipeline.domain.academy_mail import (
    LearnerReminder,
    render_moodle_message,
    render_reminder,
)
from followup_pipeline.domain.academy_words import language_of, zone_of
from followup_pipeline.engine.effects import ActionSpec, Sent
from followup_pipeline.engine.late import settle_parked
from followup_pipeline.engine.scope import Database
from followup_pipeline.integrations.errors import PermanentError, SchemaError, TransientError
from followup_pipeline.integrations.outlook import HEADER_KEY_PROPERTY, KEY_PROPERTY
from followup_pipeline.store import links, lms
from followup_pipeline.store.lms import DueRow, Tenant

#: Why a reminder by e-mail cannot be sent to a learner.
NO_ADDRESS = "the learner has no e-mail address in Moodle"
#: Where a reminder's key is looked for in the mailbox: the header a MIME send carries it in,
#: then the property a send before the MIME form carried it in.
KEY_PROPERTIES = (HEADER_KEY_PROPERTY, KEY_PROPERTY)


def marker(key: str) -> str:
    """A short mark of ``key``: a Moodle message's ``clientmsgid`` (and, before the reminders'
    templates, its text's last line)."""
    return "fu-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def quiz_url(moodle_url: str, coursemodule: int) -> str:
    """The quiz's page in the academy's Moodle."""
    return f"{moodle_url.rstrip('/')}/mod/quiz/view.php?id={coursemodule}"


@dataclass(frozen=True)
class Letters:
    """How one tenant's reminders read: in the learner's language and zone (else the
    tenant's), with the quiz's link and the learner's own signed opt-out link."""

    db: Database
    tenant: Tenant
    keys: Sequence[signed.LinkKey]
    links_url: str
    now: datetime

    def opt_out_id(self, row: DueRow) -> str | None:
        """The id of the reminder's opt-out link, if one was made (it is in the text: how
        Moodle's copy is found)."""
        with self.db.connection() as conn:
            return links.id_of(conn, "opt_out", row.idempotency_key)

    def compose(self, row: DueRow) -> LearnerReminder:
        """The reminder as its learner reads it; its opt-out link made (once)."""
        with self.db.connection() as conn, conn.transaction():
            issued = links.issue(conn, "opt_out", row.idempotency_key, row.tenant_id,
                                 at=self.now, learner_id=row.learner_id)  # fmt: skip
        token = signed.sign(self.keys, "opt_out", issued.id)
        return LearnerReminder(
            academy=self.tenant.name,
            language=language_of(row.learner_lang, self.tenant.language),
            zone=zone_of(row.learner_zone, self.tenant.time_zone),
            learner=row.learner_name,
            quiz=row.quiz_name,
            quiz_url=quiz_url(self.tenant.moodle_url, row.coursemodule),
            due_at=row.quiz_due_at,
            action_type=row.action_type,
            opt_out_url=signed.url(self.links_url, "opt_out", token),
        )


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

    def __init__(self, row: DueRow, letters: Letters, book: ReminderBook) -> None:
        self.row = row
        self.letters = letters
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

    def __init__(
        self, row: DueRow, letters: Letters, book: ReminderBook, mailbox: Mailbox | None
    ) -> None:
        super().__init__(row, letters, book)
        self.mailbox = mailbox

    def look_up(self, spec: ActionSpec) -> str | None:
        if self.mailbox is None:
            return None
        return self.mailbox.find_sent(spec.key, properties=KEY_PROPERTIES)

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Send the mail (Graph's MIME form: its one-click opt-out in ``List-Unsubscribe``,
        RFC 8058, and the key in ``X-Followup-Key``); Graph's request id."""
        address = self.row.learner_email
        if self.mailbox is None or not address:
            raise PermanentError(NO_ADDRESS, vendor="graph")
        reminder = self.letters.compose(self.row)
        mail = render_reminder(reminder)
        headers = {
            "List-Unsubscribe": f"<{reminder.opt_out_url}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        }
        self.book.mark(self.row, "attempted")
        touch()
        try:
            receipt = self.mailbox.send_mime(
                to=[address], subject=mail.subject, html=mail.html, text=mail.text,
                key=spec.key, headers=headers,
            )  # fmt: skip
        except ValueError as error:  # refused before any request: a message never to be made
            raise PermanentError(f"the message cannot be made: {error}", vendor="graph") from None
        return receipt.request_id


class MoodleReminder(ReminderSender):
    """A reminder as Moodle's own message to the learner."""

    def __init__(self, row: DueRow, letters: Letters, book: ReminderBook, site: LmsSite) -> None:
        super().__init__(row, letters, book)
        self.site = site

    def look_up(self, spec: ActionSpec) -> str | None:
        """The message whose text holds the reminder's opt-out link (or, sent before the
        templates, its ``ref`` marker)."""
        learner = self.row.learner_id
        link = self.letters.opt_out_id(self.row)
        found = self.site.find_message(learner, link) if link is not None else None
        if found is None:
            found = self.site.find_message(learner, marker(spec.key))
        return str(found.id) if found is not None else None

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Send the message (its short form); Moodle's id of it."""
        text = render_moodle_message(self.letters.compose(self.row))
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
