"""One way for every outbound action to go out (docs/architecture.md §4): the engine owns the
protocol, a sender owns only its vendor.

``Outbound.send(spec, sender)`` runs one action the same way for every kind (a task, a mail, an
alert, a CRM write, a reminder, a certificate, a publication):

1. **dead**: it failed its every attempt and waits as a dead letter for a replay: left alone.
2. **done**: the provider took it (``accepted`` or ``confirmed``): nothing is sent.
3. **maybe done** (``attempted`` or ``unknown``: an answer was lost): within the in-flight window
   a request may still be landing, so it waits (``in_flight``); after it, the sender looks the
   action up at the provider by its key before any retry: found, it is recorded ``accepted``
   and mirrored (``found``); the provider cannot tell, it waits (``unreadable``); not there, the
   earlier attempt is recorded ``failed`` (it did not take effect) and a new one goes on.
4. **the mode**: the machine's dry run, lead intake's shadow, a tenant's ``dry`` record it
   ``suppressed`` with that reason and mirror it; a tenant ``off`` records nothing.
5. ``attempted`` is committed before the request (``None`` from the ledger: another run did it
   meanwhile, ``done``). A sender that ``searches_first`` (ClickUp, whose create has no
   idempotency) looks the key up once more inside the attempt.
6. **the call**: the sender performs it, calling ``touch()`` as the request leaves (the in-flight
   window starts there). An ``IntegrationError`` ends the attempt ``unknown`` when the request
   may have taken effect (a ``TransientError`` that says so, where the sender allows it), else
   ``failed``, its text cut to ``ERROR_MAX``: ``failed``, with the error.
7. ``accepted`` with the provider's reference, mirrored in the same transaction; then the read
   back: seen, ``confirmed`` (mirrored); missing or unreadable, it stays ``accepted``.

A sender supplies four things: ``look_up`` (by key, when its vendor can be searched),
``perform``, ``read_back`` (None: nothing to read) and ``mirror`` (the outcome onto its own
records: a step, a reminder, a certificate, a lead). Capabilities never write the ledger tables.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import psycopg

from followup_pipeline.engine.ledger import ActionLedger, DryRun
from followup_pipeline.integrations.errors import IntegrationError, TransientError
from followup_pipeline.store import ledger as rows
from followup_pipeline.store.ledger import Action as Action
from followup_pipeline.store.ledger import ActionSpec as ActionSpec
from followup_pipeline.store.ledger import Attempt
from followup_pipeline.store.ledger import Kind as Kind
from followup_pipeline.store.ledger import SuppressReason as SuppressReason

#: The longest error text an attempt keeps.
ERROR_MAX = 500
#: The note of an action found at the provider after a lost answer (a sender may say its own:
#: ``found_note``; and ``found_outcome``, ``accepted`` when its look-up reads less than the object).
FOUND_NOTE = "found at the provider by its key"
#: How a send ended.
State = Literal[
    "dead", "done", "in_flight", "unreadable", "found", "suppressed", "off", "failed", "sent",
    "confirmed",
]  # fmt: skip
#: The mode an action goes out in: as it is, recorded not sent for a reason, or not at all.
Mode = Literal["live", "dry", "shadow", "off"]
MODE_REASONS: dict[Mode, SuppressReason] = {"dry": "dry_run", "shadow": "shadow"}


def error_text(error: BaseException) -> str:
    """An error as an attempt keeps it."""
    return str(error)[:ERROR_MAX]


def ambiguous(error: IntegrationError) -> bool:
    """Whether a failed request may have taken effect."""
    return isinstance(error, TransientError) and error.ambiguous


@dataclass(frozen=True)
class Performed:
    """What ``perform`` may answer instead of a bare reference: the reference and a note on
    how it was done (kept as the attempt's text: a task closed already, or gone)."""

    provider_ref: str | None
    note: str | None = None


@dataclass(frozen=True)
class Sent:
    """How a send ended: its state, the provider's reference, and the error of a failure."""

    state: State
    provider_ref: str | None = None
    error: IntegrationError | None = None
    #: The suppress reason of ``suppressed``.
    reason: SuppressReason | None = None

    @property
    def reached(self) -> bool:
        """The provider has it (now or before)."""
        return self.state in ("done", "found", "sent", "confirmed")


class Sender(Protocol):
    """What one vendor supplies to send one kind of action."""

    #: Whether the provider can be searched by the key at all (else a lost answer is settled by
    #: sending again: its requests must be safe to repeat).
    searchable: bool
    #: Look the key up inside the attempt too, before every create (a vendor without
    #: idempotency, whose object carries the key).
    searches_first: bool
    #: A failed request of this kind may have taken effect (a create); False for requests that
    #: are settled by sending them again (a PUT): never ``unknown``.
    may_be_ambiguous: bool

    def look_up(self, spec: ActionSpec) -> str | None:
        """The provider's reference of the object carrying ``spec.key``, None when it has none;
        raises ``IntegrationError`` when it cannot tell now."""
        ...

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | Performed | None:
        """Send it (calling ``touch`` as the request leaves); the provider's reference."""
        ...

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Whether the provider shows it now (None: nothing to read, or it cannot tell)."""
        ...

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """Mirror the outcome onto the sender's own records, in the ledger's transaction."""
        ...


class Outbound:
    """The one way an action goes out, for one run (its ledger stamps the run's now and id)."""

    def __init__(
        self, ledger: ActionLedger, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.ledger = ledger
        self.log = ledger.scope.log
        self.sleep = sleep

    def send(
        self, spec: ActionSpec, sender: Sender, *, mode: Mode = "live", wait_s: float = 0.0
    ) -> Sent:
        """Run ``spec`` through the protocol of the module's docstring. ``wait_s``: wait out an
        earlier request's in-flight window when at most this much of it is left (a run retry
        seconds after a failed run), instead of leaving the action ``in_flight``."""
        settled = self.settle(spec, sender, wait_s=wait_s)
        if settled is not None:
            return settled
        if mode == "off":
            return Sent("off")
        ledger = self.ledger
        reason = "dry_run" if ledger.dry_run else MODE_REASONS.get(mode)
        if reason is not None:
            if ledger.prior(spec.key).maybe_done:
                # It may have reached the provider before this run went dry (or shadow): left
                # as it is, for a live run to settle; never overwritten as suppressed.
                self.log.warning("%s may have been sent before; left for a live run", spec.key)
                return Sent("in_flight")
            return self._suppress(spec, sender, reason)
        try:
            attempt = ledger.begin(spec)
        except DryRun:  # (decided above; the ledger's door stays shut all the same)
            return Sent("suppressed", reason="dry_run")
        if attempt is None:
            return Sent("done")
        return self._call(spec, sender, attempt)

    def settle(
        self, spec: ActionSpec, sender: Sender, *, wait_s: float = 0.0, conclude: bool = True
    ) -> Sent | None:
        """Steps 1 to 3 alone: what the ledger and the provider say of ``spec`` before anything
        is sent (dead, done, in flight, unreadable, found); None when nothing stands in the way
        of a send. ``conclude=False``: a look-up that does not find it leaves the lost attempt
        as it is (for a caller that will not send now: the provider may still show it later)."""
        ledger = self.ledger
        prior = ledger.prior(spec.key)
        action = prior.action
        if action is not None and action.is_dead(max_attempts=ledger.max_attempts):
            return Sent("dead")
        if prior.done and action is not None:
            return Sent("done", action.provider_ref)
        if not prior.maybe_done:
            return None
        remaining = ledger.in_flight_s - prior.age_s
        if remaining > wait_s:
            return Sent("in_flight")
        if remaining > 0:
            self.log.info("%s: waiting %.0f s for the last request's window", spec.key, remaining)
            self.sleep(remaining)
        return self._settle(spec, sender, prior.last_attempt if conclude else None)

    def confirm(
        self,
        spec: ActionSpec,
        sender: Sender,
        ref: str,
        *,
        note: str | None = None,
        found_note: str | None = None,
    ) -> None:
        """The provider shows the action's object ``ref`` now, read back at a later run (a
        reminder seen in the learner's messages, a credential in the platform's listing):
        ``confirmed``, mirrored by ``sender``. An action held as lost or failed is first
        recorded found (``note``: how it was seen, else ``found_note``, else the sender's); one with
        no row of ours, or suppressed (issued by hand), changes only the sender's records."""
        ledger = self.ledger
        shown = Sent("confirmed", ref)
        prior = ledger.prior(spec.key)
        action = prior.action
        if action is None or action.outcome in ("suppressed", "confirmed"):
            with ledger.db.connection() as conn, conn.transaction():
                sender.mirror(conn, spec, shown)
            return
        if not prior.done:  # lost, or failed: the provider has it after all
            note = note or found_note or str(getattr(sender, "found_note", FOUND_NOTE))
            ledger.found(spec, provider_ref=ref, note=note)
            prior = ledger.prior(spec.key)
        last = prior.last_attempt
        assert prior.action is not None  # the row is there (found above)
        assert last is not None
        ledger.finish(
            last, "confirmed", provider_ref=ref,
            error=note if note is not None else prior.action.last_error,
            also=lambda conn: sender.mirror(conn, spec, shown),
        )  # fmt: skip

    def suppress(self, spec: ActionSpec, sender: Sender, reason: SuppressReason) -> Sent:
        """Record the action suppressed for a reason of the sender's own (completed, opted
        out, superseded, …), mirrored in the same transaction; ``done`` when it had reached the
        provider (then nothing is suppressed)."""
        return self._suppress(spec, sender, reason)

    def _settle(self, spec: ActionSpec, sender: Sender, last: Attempt | None) -> Sent | None:
        """An attempt whose answer was lost: the provider is asked; None when a new one may go."""
        if not sender.searchable:
            return None  # its requests are safe to repeat: the next attempt settles it
        try:
            found = sender.look_up(spec)
        except IntegrationError as error:
            self.log.info("%s: the provider cannot tell now whether it has it: %s", spec.key, error)
            return Sent("unreadable", error=error)
        if found is None:
            if last is not None:
                self.ledger.finish(last, "failed", error="the provider does not have it")
            return None
        if last is not None:  # the search found it: the lost attempt took effect
            sent = Sent("found", found)
            # A sender may say how a find is recorded: confirmed (the provider's object was
            # read) unless its look-up proves less (a mail in Sent Items is accepted, not read).
            outcome: rows.FinalOutcome = getattr(sender, "found_outcome", "confirmed")
            note: str = getattr(sender, "found_note", FOUND_NOTE)
            self.ledger.finish(
                last, outcome, provider_ref=found, error=note,
                also=lambda conn: sender.mirror(conn, spec, sent),
            )  # fmt: skip
            return sent
        return self._found(spec, sender, found, note=getattr(sender, "found_note", FOUND_NOTE))

    def _found(self, spec: ActionSpec, sender: Sender, ref: str, *, note: str) -> Sent:
        sent = Sent("found", ref)
        self.ledger.found(
            replace(spec), provider_ref=ref, note=note,
            also=lambda conn: sender.mirror(conn, spec, sent),
        )  # fmt: skip
        return sent

    def _suppress(self, spec: ActionSpec, sender: Sender, reason: SuppressReason) -> Sent:
        sent = Sent("suppressed", reason=reason)
        with self.ledger.db.connection() as conn, conn.transaction():
            if not rows.suppress(conn, spec, reason=reason):
                return Sent("done")  # it reached the provider: nothing is suppressed
            sender.mirror(conn, spec, sent)
        if reason == "dry_run":
            self.log.warning(
                "DRY RUN: %s (%s) not sent to the provider; recorded suppressed, reason dry_run",
                spec.key,
                spec.kind,
            )
        return sent

    def _call(self, spec: ActionSpec, sender: Sender, attempt: Attempt) -> Sent:
        ledger = self.ledger
        try:
            if sender.searchable and sender.searches_first:
                found = sender.look_up(spec)
                if found is not None:
                    return self._finish(spec, sender, attempt, Sent("found", found))
            performed = sender.perform(spec, lambda: ledger.touch(attempt))
        except IntegrationError as error:
            maybe = sender.may_be_ambiguous and ambiguous(error)
            ledger.fail(attempt, error_text(error), maybe_done=maybe)
            return Sent("failed", error=error)
        if not isinstance(performed, Performed):
            performed = Performed(performed)
        ref, note = performed.provider_ref, performed.note
        sent = self._finish(spec, sender, attempt, Sent("sent", ref), note=note)
        try:
            seen = sender.read_back(spec, ref)
        except IntegrationError as error:
            self.log.info("%s: not read back yet: %s", spec.key, error)
            return sent
        if not seen:
            return sent
        confirmed = Sent("confirmed", ref)
        ledger.finish(
            attempt, "confirmed", provider_ref=ref, error=note,
            also=lambda conn: sender.mirror(conn, spec, confirmed),
        )  # fmt: skip
        return confirmed

    def _finish(
        self, spec: ActionSpec, sender: Sender, attempt: Attempt, sent: Sent, *,
        note: str | None = None,
    ) -> Sent:  # fmt: skip
        """``accepted`` (or, for one found inside the attempt, ``confirmed``: it was read)."""
        outcome: rows.FinalOutcome = "confirmed" if sent.state == "found" else "accepted"
        self.ledger.finish(
            attempt, outcome, provider_ref=sent.provider_ref, error=note,
            also=lambda conn: sender.mirror(conn, spec, sent),
        )  # fmt: skip
        return sent
