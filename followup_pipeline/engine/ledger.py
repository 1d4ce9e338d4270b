"""The action ledger service: every outbound effect (a task, a mail, an alert, a CRM write, a
reminder, a certificate, a publication) is one ``actions`` row keyed by its idempotency key.

The six outcomes: ``attempted`` (committed before the provider is called), ``accepted`` (the
provider answered, with its id), ``confirmed`` (the provider's object was read back),
``suppressed`` (deliberately not done, with a reason), ``failed`` and ``unknown`` (the answer was
lost: it may have taken effect). Every attempt is kept in ``action_attempts``.

A row left ``attempted`` or ``unknown`` may have reached the provider: a sender asks the provider
(by the key it carried) before anything else, and not before the *in-flight window* has passed,
since a request of a run that died may still be landing. Senders do not use this service
themselves: ``effects.Outbound`` runs the one sequence over it, and a sender supplies its vendor's
part.

Dry run (``FOLLOWUP_DRY_RUN``) is decided here, in ``begin``, the one door to a provider: every
action of every kind is recorded ``suppressed`` with reason ``dry_run``, a warning is logged, and
``DryRun`` is raised instead of an attempt, so no sender can reach the outside by forgetting it.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from followup_pipeline.engine.scope import Database, RunScope
from followup_pipeline.settings import Settings
from followup_pipeline.store import ledger as rows
from followup_pipeline.store.ledger import Action, ActionSpec, Attempt, FinalOutcome, SuppressReason

#: Work done in the transaction that records an outcome (a step marked fired with its task).
Also = Callable[[psycopg.Connection[Any]], object]


class DryRun(Exception):
    """The action was not attempted: the machine runs dry (recorded ``suppressed``, reason
    ``dry_run``)."""


@dataclass(frozen=True)
class Prior:
    """What the ledger holds for a key before a send: the row (if any) and its age in seconds
    by the database's clock."""

    action: Action | None
    age_s: float

    @property
    def done(self) -> bool:
        """The provider took it (``accepted`` or ``confirmed``)."""
        return self.action is not None and self.action.outcome in ("accepted", "confirmed")

    @property
    def maybe_done(self) -> bool:
        """The answer was lost (``attempted`` or ``unknown``): the provider must be asked."""
        return self.action is not None and self.action.outcome in ("attempted", "unknown")

    @property
    def last_attempt(self) -> Attempt | None:
        """The row's latest attempt, to settle it with what the provider says."""
        if self.action is None:
            return None
        return Attempt(action_id=self.action.id, attempt_no=self.action.attempts)


class ActionLedger:
    """The ledger of one run: its attempts are stamped with the scope's ``now`` and run id."""

    def __init__(
        self,
        db: Database,
        scope: RunScope,
        *,
        in_flight_s: float,
        max_attempts: int,
        dry_run: bool = False,
    ) -> None:
        self.db = db
        self.scope = scope
        self.in_flight_s = in_flight_s
        self.max_attempts = max_attempts
        self.dry_run = dry_run

    @classmethod
    def of(cls, db: Database, scope: RunScope, settings: Settings) -> "ActionLedger":
        """The ledger with the configured in-flight window and attempts before a dead letter."""
        return cls(
            db,
            scope,
            in_flight_s=settings.in_flight_s(),
            max_attempts=settings.action_max_attempts,
            dry_run=settings.dry_run,
        )

    def prior(self, key: str) -> Prior:
        """The row of ``key`` and its age."""
        with self.db.connection() as conn:
            action = rows.action_by_key(conn, key)
            age = rows.age_s(conn, action.id) if action is not None else 0.0
        return Prior(action, age)

    def in_flight(self, prior: Prior) -> bool:
        """An answer was lost so lately that its request may still be landing: asking the
        provider now could miss it, and sending again could double it."""
        return prior.maybe_done and prior.age_s < self.in_flight_s

    def dead(self, key: str) -> bool:
        """Whether the action of ``key`` failed its every attempt and waits as a dead letter
        for an operator's replay (then it is left alone)."""
        action = self.prior(key).action
        return action is not None and action.is_dead(max_attempts=self.max_attempts)

    def begin(self, spec: ActionSpec, *, dry_run_also: Also | None = None) -> Attempt | None:
        """Mark the action attempted (committed before the provider is called); None if it
        reached the provider already. In a dry run: record it ``suppressed`` (with
        ``dry_run_also`` in the same transaction), log it, and raise ``DryRun``."""
        if self.dry_run:
            if self.prior(spec.key).maybe_done:
                # It may have reached the provider before the machine went dry: left as it is,
                # to be settled by a live run.
                self.scope.log.warning("DRY RUN: %s may have been sent before; left", spec.key)
                raise DryRun(spec.key)
            with self.db.connection() as conn, conn.transaction():
                if dry_run_also is not None:
                    dry_run_also(conn)
                rows.suppress(conn, spec, reason="dry_run")
            self.scope.log.warning(
                "DRY RUN: %s (%s) not sent to the provider; recorded suppressed, reason dry_run",
                spec.key,
                spec.kind,
            )
            raise DryRun(spec.key)
        with self.db.connection() as conn, conn.transaction():
            return rows.begin_attempt(
                conn, spec, started_at=self.scope.now, run_id=self.scope.run_id
            )

    def found(
        self, spec: ActionSpec, *, provider_ref: str, note: str, also: Also | None = None
    ) -> None:
        """Record that the provider has the object of an earlier attempt whose answer was lost
        (found by its key): a new attempt, ``accepted`` at once (with ``also`` in the same
        transaction). No request is made, so a dry run records it too."""
        with self.db.connection() as conn, conn.transaction():
            attempt = rows.begin_attempt(
                conn, spec, started_at=self.scope.now, run_id=self.scope.run_id
            )
            if attempt is not None:
                rows.finish_attempt(
                    conn,
                    attempt,
                    outcome="accepted",
                    finished_at=self.scope.now,
                    provider_ref=provider_ref,
                    error=note,
                )
            if also is not None:
                also(conn)

    def touch(self, attempt: Attempt) -> None:
        """The request leaves now: the in-flight window starts here."""
        with self.db.connection() as conn:
            rows.touch(conn, attempt.action_id)

    def finish(
        self,
        attempt: Attempt,
        outcome: FinalOutcome,
        *,
        provider_ref: str | None = None,
        error: str | None = None,
        also: Also | None = None,
    ) -> None:
        """Record how an attempt ended, on the attempt and on the action (with ``also`` in the
        same transaction)."""
        with self.db.connection() as conn, conn.transaction():
            rows.finish_attempt(
                conn,
                attempt,
                outcome=outcome,
                finished_at=self.scope.now,
                provider_ref=provider_ref,
                error=error,
            )
            if also is not None:
                also(conn)

    def fail(self, attempt: Attempt, error: str, *, maybe_done: bool) -> None:
        """An attempt that failed: ``unknown`` when it may have taken effect, else ``failed``."""
        self.finish(attempt, "unknown" if maybe_done else "failed", error=error)

    def suppress(
        self,
        spec: ActionSpec,
        reason: SuppressReason,
        *,
        first: Callable[[psycopg.Connection[Any]], bool] | None = None,
    ) -> bool:
        """Record the action as suppressed for ``reason``; False if it had reached the provider.
        ``first`` runs in the same transaction before it, and when it answers False nothing is
        suppressed (a step that another run settled meanwhile)."""
        with self.db.connection() as conn, conn.transaction():
            if first is not None and not first(conn):
                return False
            return rows.suppress(conn, spec, reason=reason)
