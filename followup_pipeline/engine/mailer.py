"""Mail that goes out once: every send is a ledger action, and Graph's Sent Items decide a send
whose answer was lost.

Graph has no idempotency header and a 5xx, 429 or timeout on ``sendMail`` is ambiguous: the
mail may have gone (docs/vendors.md, Microsoft Graph). So the action is committed ``attempted``
before the request, its key travels on the message as an extended property, and a row left
``attempted`` or ``unknown`` (a crash after the 202, a fault that sent and then answered 500) is
settled by looking for the key in the mailbox before anything is sent again, once the earlier
request's in-flight window has passed (waited for, up to ``MAX_WAIT_S``).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from followup_pipeline.engine.ledger import ActionLedger, DryRun, Prior
from followup_pipeline.engine.scope import Database, RunScope
from followup_pipeline.integrations.errors import IntegrationError, TransientError
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.settings import Settings
from followup_pipeline.store.ledger import ActionSpec, Kind
from followup_pipeline.store.run_lock import RunLock

MailOutcome = Literal["sent", "already_sent", "suppressed", "in_flight"]
#: The longest a send waits for an earlier send's in-flight window to pass before it asks the
#: mailbox (the default window is 100 s); longer, the run fails and says when to run again.
MAX_WAIT_S = 150.0


@dataclass(frozen=True)
class MailResult:
    """How one ``send_once`` ended, and Graph's ``request-id`` when it sent."""

    key: str
    outcome: MailOutcome
    request_id: str | None = None


class MailError(RuntimeError):
    """A send failed; the action says ``failed`` or ``unknown`` and the next run settles it."""


class LockableDatabase(Database, Protocol):
    """Pooled connections, and the URL a lock takes a connection of its own from."""

    @property
    def url(self) -> str:
        """The database's URL."""
        ...


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
    ) -> None:
        self.run = run
        self.db = db
        self.outlook = outlook
        self.settings = settings
        self.sleep = sleep
        self.log = run.log
        self.ledger = ActionLedger.of(db, run, settings)

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
            return self._send_once(
                spec, to=to, subject=subject, html=html, text=text, resend=resend
            )
        finally:
            lock.release()

    def _send_once(
        self,
        spec: ActionSpec,
        *,
        to: list[str],
        subject: str,
        html: str,
        text: str | None,
        resend: bool,
    ) -> MailResult:
        key = spec.key
        prior = self.ledger.prior(key)
        if prior.done and prior.action is not None:
            return MailResult(key, "already_sent", prior.action.provider_ref)
        if prior.maybe_done:
            remaining = self.ledger.in_flight_s - prior.age_s
            if remaining > MAX_WAIT_S:
                self.log.info("%s: the last send may still be on its way; left alone", key)
                return MailResult(key, "in_flight")
            if remaining > 0:
                # A run retry starts seconds after the failed run: wait out the rest of the
                # window here, then ask the mailbox, instead of failing the retry too.
                self.log.info("%s: waiting %.0f s for the last send's window", key, remaining)
                self.sleep(remaining)
            settled = self._settle(spec, prior)
            if settled is not None:
                return settled
        if not resend:
            raise MailError(f"{key}: the earlier send is not in Sent Items")
        return self._send(spec, to=to, subject=subject, html=html, text=text)

    def _settle(self, spec: ActionSpec, prior: Prior) -> MailResult | None:
        """Ask Sent Items about an earlier send whose answer was lost; the result if it went."""
        try:
            message_id = self.outlook.find_sent(spec.key)
        except IntegrationError as error:
            raise MailError(f"{spec.key}: Sent Items could not be read: {error}") from error
        if message_id is None:
            self.log.info("%s: not in Sent Items; sending (again)", spec.key)
            return None
        # The mail that went out is the earlier run's: keep what it recorded (its `until`).
        earlier = prior.action.payload if prior.action is not None else None
        self.ledger.found(
            replace(spec, payload=earlier), provider_ref=message_id, note="found in Sent Items"
        )
        return MailResult(spec.key, "already_sent", message_id)

    def _send(
        self, spec: ActionSpec, *, to: list[str], subject: str, html: str, text: str | None
    ) -> MailResult:
        try:
            attempt = self.ledger.begin(spec)
        except DryRun:
            return MailResult(spec.key, "suppressed")
        if attempt is None:  # another run sent it meanwhile
            return MailResult(spec.key, "already_sent")

        def stamp() -> None:
            self.ledger.touch(attempt)  # the in-flight window starts now

        try:
            if text is None:
                stamp()
                receipt = self.outlook.send_mail(to=to, subject=subject, html=html, key=spec.key)
            else:  # text and HTML: multipart/alternative, through a draft
                receipt = self.outlook.send_multipart(
                    to=to, subject=subject, html=html, text=text, key=spec.key, before_send=stamp
                )
        except IntegrationError as error:
            # A 5xx, 429 or timeout: maybe sent.
            self.ledger.fail(attempt, str(error), maybe_done=isinstance(error, TransientError))
            raise MailError(f"{spec.key}: Graph failed: {error}") from error
        self.ledger.finish(attempt, "accepted", provider_ref=receipt.request_id)
        return MailResult(spec.key, "sent", receipt.request_id)
