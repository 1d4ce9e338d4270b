"""The event worker: what every pipeline that consumes the event log does with an event.

Claims are leases committed at once (``FOR UPDATE SKIP LOCKED``; each claim charges an attempt
before the work starts), so no row lock is held while a vendor is asked, a run that dies lets
its lease run out, and several runs can share the log. A handler does the event's items; each
finished item is recorded under its completion key ``{event_id}:{item}:{step}`` (an event of
one item has the one item 0), committed with the item's own writes, so a retry or a replay
under the original id skips what is done.

Failures: an error of the event's own (an ``ItemFailed``, a vendor's, a statement refused for
what it carries) fails the event: it waits with exponential backoff and ±25 % jitter, or becomes a
dead letter after its last attempt, kept with its payload, the step that failed and the last
error; ``followup dead-letters replay event:<id>`` and the ``replay`` job put it back under its
id. An error of the database itself (the connection lost, a statement or lock timeout, a shutdown,
a full disk: ``run_stops.py`` lists them by SQLSTATE class) stops the run, raising
``RunStopped``: the state is unclear. The event is not charged for it, and becomes a dead letter
only after it stopped ``FOLLOWUP_EVENT_RUN_STOPS_MAX`` runs in a row. A serialization failure or
a deadlock is first retried once, in place.

A capability makes its handler for each run from a ``WorkerRun``: the worker's connection (no
transaction stays open on it between units), the run's database (``PostgresResource``: work
committed on a connection of its own, as the action ledger's ``attempted`` before a request
leaves), the run's scope (now, run id, the op's log), the settings and the op's resources.
"""

import random
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal, Protocol

import psycopg
from psycopg import pq

from followup_pipeline.engine.run_stops import RunStopped, database_fault, error_name, record_stop
from followup_pipeline.engine.scope import Database, RunScope
from followup_pipeline.settings import Settings
from followup_pipeline.store import events
from followup_pipeline.store.db import StoreError, storable
from followup_pipeline.store.events import Event

#: Batches one run claims at most, so a flood cannot keep a run going for ever.
MAX_BATCHES = 20


def completion_key(event_id: int, item: int, step: str) -> str:
    """The key an item's finished step is recorded under."""
    return f"{event_id}:{item}:{step}"


class ItemFailed(Exception):
    """One item could not be done; ``step`` names it for the dead letter. A ``permanent`` failure
    (a body that cannot be read) cannot succeed on a retry: it is dead-lettered at once."""

    def __init__(self, step: str, error: str, *, permanent: bool = False) -> None:
        super().__init__(error)
        self.step = step
        self.permanent = permanent


class EventHandler(Protocol):
    """What a pipeline does with one claimed event of its source."""

    counts: Counter[str]

    def handle(self, event: Event, done: set[str]) -> bool:
        """Do every item not in ``done`` (their completion keys), recording each; True when it
        marked the event done itself, in the transaction of its last writes. Raises
        ``ItemFailed`` for the item that stopped it."""
        ...


class EventWorker:
    """Claims events and hands each to ``handler``, on one connection with no transaction open
    (its claims must commit at once)."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        handler: EventHandler,
        settings: Settings,
        rng: random.Random | None = None,
        *,
        sources: Sequence[str],
    ) -> None:
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise StoreError("the event worker needs a connection with no transaction open")
        self.conn = conn
        self.handler = handler
        self.settings = settings
        self.rng = rng or random.Random()  # noqa: S311 (backoff jitter)
        self.counts = handler.counts
        #: The sources whose due events this worker claims (a replay claims any it is named).
        self.sources = tuple(sources)
        #: Who holds this run's claims (``claimed_by``).
        self.run_id = ""

    def run(self, ids: Sequence[int] | None = None) -> Counter[str]:
        """Claim and process due events (or the named pending ones: a replay), batch by batch."""
        run = self.run_id = f"worker-{uuid.uuid4().hex[:12]}"
        lease = timedelta(seconds=self.settings.event_lease_s)
        seen: list[int] = []
        for _ in range(MAX_BATCHES):
            with self.conn.transaction():
                if ids is not None:
                    batch = events.claim_ids(self.conn, ids, lease=lease, run=run)
                else:
                    limit = self.settings.event_batch_size
                    batch = events.claim(
                        self.conn,
                        limit=limit,
                        lease=lease,
                        run=run,
                        sources=self.sources,
                        exclude=seen,
                    )
            for index, event in enumerate(batch):
                seen.append(event.id)
                self.process(event, behind=[e.id for e in batch[index + 1 :]])
            if not batch or ids is not None:
                break
        return self.counts

    def process(self, event: Event, behind: Sequence[int] = ()) -> None:
        """Hand one claimed event to the handler, then mark it done, retried or dead; or stop
        the run on an error of the database itself, freeing ``behind`` (the batch's events not
        started) and charging the event nothing.

        The attempt is charged (committed) before the first item: an event that kills the
        worker still reaches its limit, and the untouched events of a batch are charged nothing.
        """
        self.counts["events_claimed"] += 1
        if event.attempts >= self.settings.event_attempts(event.source):
            # Every attempt was charged and none ended: the worker died on it each time. A dead
            # letter now, before it can kill this run too and hold back the events behind it.
            message = f"the worker died during each of its {event.attempts} attempts"
            self.fail(event, "worker_died", message, permanent=True)
            return
        with self.conn.transaction():
            attempts = events.start_attempt(self.conn, event.id)
        event = replace(event, attempts=attempts)
        for retry in (False, True):
            try:
                self.attempt(event)
            except ItemFailed as failed:
                self.fail(event, failed.step, str(failed), permanent=failed.permanent)
                return
            except Exception as error:
                fault = database_fault(error, self.conn)
                if fault is None:
                    self.fail(event, "event", repr(error))
                    return
                if fault == "conflict" and not retry:
                    # Another run's transaction won (two register runs side by side): once more.
                    self.counts["events_conflict_retried"] += 1
                    continue
                raise self.stop(event, error, behind, again=retry) from error
            self.counts["events_done"] += 1
            return

    def attempt(self, event: Event) -> None:
        """The handler does the event's items not done yet; the event is marked done after them
        unless the handler did so itself."""
        with self.conn.transaction():
            done = events.completed_keys(self.conn, event.id)
        if not self.handler.handle(event, done):
            with self.conn.transaction():
                events.mark_done(self.conn, event.id)

    def stop(
        self, event: Event, error: Exception, behind: Sequence[int], *, again: bool
    ) -> RunStopped:
        """Record that the event's handling met an error of the database itself (its attempt
        given back, the stop counted, ``behind`` freed) and the ``RunStopped`` to raise."""
        named = error_name(error) + (" (again, after one retry)" if again else "")
        what = record_stop(
            self.conn,
            event_id=event.id,
            run=self.run_id,
            error=named,
            stops_max=self.settings.event_run_stops_max,
            behind=behind,
        )
        return RunStopped(f"event:{event.id} stopped the run: {named}; {what}")

    def fail(self, event: Event, step: str, error: str, *, permanent: bool = False) -> None:
        """Count the failed attempt: wait with backoff, or dead-letter after the last one."""
        delay = events.backoff(
            event.attempts,
            base_s=self.settings.event_backoff_base_s,
            max_s=self.settings.event_backoff_max_s,
            rng=self.rng,
        )
        with self.conn.transaction():
            dead = events.mark_failed(
                self.conn,
                event=event,
                step=storable(step, 200),
                error=storable(error),
                max_attempts=1 if permanent else self.settings.event_attempts(event.source),
                delay=delay,
            )
        self.counts["events_dead" if dead else "events_retried"] += 1


def worker_outcome(counts: Mapping[str, object]) -> Literal["ok", "partial"]:
    """``partial`` when an event failed (retried or dead-lettered), else ``ok``."""
    return "partial" if counts.get("events_retried") or counts.get("events_dead") else "ok"


#: The Dagster resources of the op that runs the worker, by key (a handler takes its vendor
#: clients from them).
ResourcesByKey = Mapping[str, object]


@dataclass(frozen=True)
class WorkerRun:
    """What a handler of one run is made from (the module's docstring): the worker's connection,
    the run's database and scope, the settings and the op's resources."""

    conn: psycopg.Connection[Any]
    db: Database
    scope: RunScope
    settings: Settings
    resources: ResourcesByKey = field(default_factory=dict)


#: How a capability makes the handler of its source's events for one run.
HandlerFactory = Callable[[WorkerRun], EventHandler]


class EventHandlers:
    """Every event source's handler factory: the capabilities' ``EVENT_HANDLERS`` gathered by
    ``defs/__init__.py`` into one resource, so that a replay can handle any source's event
    without a capability importing another."""

    def __init__(self, factories: Mapping[str, HandlerFactory]) -> None:
        self.factories = dict(factories)

    def dispatcher(self, run: WorkerRun) -> EventHandler:
        """One handler that hands each event to its source's handler (made on first use)."""
        return _Dispatcher(self.factories, run)


class _Dispatcher:
    """Hands each event to the handler of its source; their counts are summed here."""

    def __init__(self, factories: Mapping[str, HandlerFactory], run: WorkerRun) -> None:
        self.factories = factories
        self.made: dict[str, EventHandler] = {}
        self.run = run
        self.counts: Counter[str] = Counter()

    def handle(self, event: Event, done: set[str]) -> bool:
        """The event's source's handler does it; an event of no known source fails for good."""
        if event.source not in self.factories:
            raise ItemFailed("source", f"no handler for source {event.source!r}", permanent=True)
        handler = self.made.get(event.source)
        if handler is None:
            handler = self.made[event.source] = self.factories[event.source](self.run)
            handler.counts = self.counts
        return handler.handle(event, done)
