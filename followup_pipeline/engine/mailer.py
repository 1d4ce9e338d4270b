"""Mail that goes out once: every send is a ledger action that goes out the one way
(``engine/effects.py``), and the mailbox decides a send whose answer was lost.

Graph has no idempotency header, and a 5xx, 429 or timeout on ``sendMail`` is ambiguous: the
mail may have gone (docs/vendors.md, Microsoft Graph). So the key travels on the message as an
extended property, and ``GraphMail``, the sender, supplies Graph's part: the look-up of the key
among the mailbox's messages (drafts do not count), the send (``touch`` as the request leaves:
before ``sendMail``, or before the draft's send of a multipart message), no read-back (a 202 is
"accepted": the copy reaches Sent Items later, and a lost answer is settled by the look-up), and
no records of its own.

``Mailer`` adds what is mail's around it: an advisory lock per key (two runs of one window at
once), waiting out up to ``MAX_WAIT_S`` of an earlier send's in-flight window (a run retry
seconds after a failed run), the earlier run's payload kept when its mail is found, a settle
without a resend (``resend=False``), and the ``MailResult`` or ``MailError`` its callers read.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import psycopg

from followup_pipeline.engine.effects import ActionSpec, Kind, Outbound, Sent, State, SuppressReason
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.scope import Database, RunScope
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.settings import Settings
from followup_pipeline.store.run_lock import RunLock

MailOutcome = Literal["sent", "already_sent", "suppressed", "in_flight"]
#: The longest a send waits for an earlier send's in-flight window to pass before it asks the
#: mailbox (the default window is 100 s); longer, the run fails and says when to run again.
MAX_WAIT_S = 150.0
#: Why a send raises ``MailError``, by how it ended.
FAILURES: dict[State, str] = {
    "failed": "Graph failed",
    "unreadable": "Sent Items could not be read",
    "dead": "failed every attempt: a dead letter until it is replayed",
    "off": "not sent: mail is off",
}


@dataclass(frozen=True)
class MailResult:
    """How one ``send_once`` ended, and Graph's ``request-id`` when it sent."""

    key: str
    outcome: MailOutcome
    request_id: str | None = None


class MailError(RuntimeError):
    """A send did not go: Graph failed (the action says ``failed`` or ``unknown``, and the next
    run settles it), the mailbox could not be read, or the action is a dead letter."""


class LockableDatabase(Database, Protocol):
    """Pooled connections, and the URL a lock takes a connection of its own from."""

    @property
    def url(self) -> str:
        """The database's URL."""
        ...


@dataclass(frozen=True)
class Letter:
    """What one mail says and to whom; with ``text`` it goes as plain text and HTML."""

    to: list[str]
    subject: str
    html: str
    text: str | None = None


class GraphMail:
    """Graph's part of sending one mail (an ``effects.Sender``)."""

    #: The key is on the message, and the mailbox can be searched by it.
    searchable = True
    #: The ledger says when a send may have gone; a search before every send would only double
    #: the requests.
    searches_first = False
    may_be_ambiguous = True
    #: A mail found in Sent Items was sent, not read by its recipient: ``accepted``, as a 202.
    found_outcome = "accepted"
    found_note = "found in Sent Items"

    def __init__(self, outlook: OutlookClient, letter: Letter) -> None:
        self.outlook = outlook
        self.letter = letter

    def look_up(self, spec: ActionSpec) -> str | None:
        """The id of the mailbox's message that carries the key, None when there is none."""
        return self.outlook.find_sent(spec.key)

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Send the letter; Graph's ``request-id``."""
        letter = self.letter
        if letter.text is None:
            touch()
            receipt = self.outlook.send_mail(
                to=letter.to, subject=letter.subject, html=letter.html, key=spec.key
            )
        else:  # text and HTML: multipart/alternative, through a draft; only its send leaves
            receipt = self.outlook.send_multipart(
                to=letter.to,
                subject=letter.subject,
                html=letter.html,
                text=letter.text,
                key=spec.key,
                before_send=touch,
            )
        return receipt.request_id

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Nothing to read yet: Graph's 202 is "accepted", its copy lands in Sent Items later."""
        return None

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """Mail has no records of its own (its callers keep theirs)."""


class Mailer:
    """Sends mail through Graph at most once per ledger key, for one run."""

    def __init__(
        self,
        run: RunScope,
        db: LockableDatabase,
        outlook: OutlookClient,
        settings: Settings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int | None = None,
    ) -> None:
        self.run = run
        self.db = db
        self.outlook = outlook
        self.settings = settings
        self.log = run.log
        self.ledger = ActionLedger.of(db, run, settings)
        if max_attempts is not None:  # (alerts: never a dead letter; their schedule bounds them)
            self.ledger.max_attempts = max_attempts
        self.outbound = Outbound(self.ledger, sleep=sleep)

    def send_once(
        self,
        *,
        key: str,
        kind: Kind,
        to: list[str],
        subject: str,
        html: str,
        text: str | None = None,
        payload: dict[str, object] | None = None,
        resend: bool = True,
    ) -> MailResult:
        """Send the message unless the action of ``key`` reached Graph already.

        Two runs of one window at once (a retry and a backfill) are kept apart by an advisory
        lock on the key: the second finds the first sending and leaves it alone. With
        ``resend=False`` an earlier send is only settled: ``MailError`` if it did not arrive.
        """
        owner = self.run.run_id or "mailer"
        lock = RunLock.try_take(self.db.url, f"mail:{key}", owner=owner)
        try:
            if not lock.held:
                self.log.info("%s: another run is sending it now (%s)", key, lock.holder)
                return MailResult(key, "in_flight")
            spec = ActionSpec(
                key=key,
                kind=kind,
                due_at=self.run.now,
                time_zone=self.settings.timezone,
                payload=payload,
            )
            mail = GraphMail(self.outlook, Letter(to, subject, html, text))
            return self._result(key, self._send(spec, mail, resend=resend))
        finally:
            lock.release()

    def skip(self, *, key: str, kind: Kind, reason: SuppressReason) -> bool:
        """Record the mail of ``key`` not sent for ``reason`` (a report with nothing due);
        False when an earlier send reached Graph or may have: that record stays, for a later run
        to settle against Sent Items."""
        prior = self.ledger.prior(key)
        if prior.done or prior.maybe_done:
            return False
        zone = self.settings.timezone
        spec = ActionSpec(key=key, kind=kind, due_at=self.run.now, time_zone=zone)
        return self.ledger.suppress(spec, reason)

    def _send(self, spec: ActionSpec, mail: GraphMail, *, resend: bool) -> Sent:
        """Settle an earlier send, then (``resend``) send."""
        # A mail found in the mailbox is the earlier run's: it is recorded with what that run
        # recorded (its `until`), not with this run's payload, which only a new send records.
        earlier = self.ledger.prior(spec.key).action
        as_sent = replace(spec, payload=earlier.payload) if earlier is not None else spec
        # Not resending: a mail not found yet stays lost, not failed; a later run asks again
        # (Graph's copy reaches Sent Items after its 202).
        settled = self.outbound.settle(as_sent, mail, wait_s=MAX_WAIT_S, conclude=resend)
        if settled is not None:
            return settled
        if not resend:
            raise MailError(f"{spec.key}: the earlier send is not in Sent Items")
        return self.outbound.send(spec, mail, wait_s=MAX_WAIT_S)

    def _result(self, key: str, sent: Sent) -> MailResult:
        """What the callers read of how a send ended; ``MailError`` when it did not go."""
        if sent.state in ("sent", "confirmed"):
            return MailResult(key, "sent", sent.provider_ref)
        if sent.reached:  # sent before, or found in the mailbox
            return MailResult(key, "already_sent", sent.provider_ref)
        if sent.state == "in_flight":
            self.log.info("%s: the last send may still be on its way; left alone", key)
            return MailResult(key, "in_flight")
        if sent.state == "suppressed":
            return MailResult(key, "suppressed")
        why = FAILURES[sent.state] + (f": {sent.error}" if sent.error is not None else "")
        raise MailError(f"{key}: {why}") from sent.error
