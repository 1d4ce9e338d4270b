"""Registration from the event log: claim due events, open or close watches item by item.

Each item's write is keyed ``{event_id}:{item}:{step}`` in ``step_completions`` and committed
with its key, so a retry or a replay (same event id) skips what is done. EspoCRM
re-batches failed items with newer ones, so this per-item idempotency carries the load; opening
is also ``ON CONFLICT DO NOTHING``, so a redelivery never resets a running cadence.

Claims are leases committed at once (each claim counts an attempt), so no row lock is held while
the CRM is asked and a run that dies lets its lease run out. The CRM is read first, in one
listing per 50 deals of the event; then the common event (distinct deals, all listed) is written
whole in one transaction of a few statements (``all_at_once``), its deal marks taken in the
deals' order so two runs cannot deadlock. Any other event, or one whose statements together fail,
is done item by item, each item in a transaction of its own after its deal was read: an item
that fails is rolled back alone and the items before it are kept.

Failures: any error of an item (the CRM, an unreadable body, a value the database refuses) stops
the event at that item; it waits with backoff, or becomes a dead letter after the last attempt.
Only a lost database connection aborts the run (the state is unclear).

Order: when the deal was read from the CRM its current stage decides; and each deal keeps a mark
of the newest event applied, so an older event that arrives (or is replayed) later is
``superseded`` and changes nothing.
"""

import dataclasses
import random
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import psycopg
from psycopg import pq

from followup_pipeline.defs.common import stage_policy, subject_of
from followup_pipeline.domain.decisions import Close, CloseReason, decide_for_stage
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError, SchemaError
from followup_pipeline.integrations.espocrm import IDS_PER_LISTING
from followup_pipeline.integrations.espocrm_models import Deal, DealListing
from followup_pipeline.integrations.espocrm_webhooks import (
    DealItem,
    UnparseableBody,
    espocrm_items,
)
from followup_pipeline.settings import Settings
from followup_pipeline.store import events
from followup_pipeline.store.cadences import Plan, load_plan
from followup_pipeline.store.db import StoreError, lost_connection, storable
from followup_pipeline.store.events import Event
from followup_pipeline.store.holidays import load_calendar
from followup_pipeline.store.watches import (
    Subject,
    close_watch,
    close_watches,
    latest_watch_of,
    latest_watches_of,
    open_watch,
    open_watch_of,
    open_watches_for,
    open_watches_of,
)

#: Batches one run claims at most, so a flood cannot keep a run going for ever.
MAX_BATCHES = 20
#: How long a claim holds an event; a run that dies frees it after this.
LEASE = timedelta(minutes=15)


class UnreadDeal(RuntimeError):
    """The event's listing of deals failed: an item that needs its deal cannot be done now."""


class DealReader(Protocol):
    """What registration needs from the CRM: the deals of some ids in one listing, and one deal
    by id (to tell a deleted deal from one the listing left out)."""

    def list_deals_by_ids(self, *, ids: Sequence[str]) -> DealListing:
        """The deals of ``ids`` that the CRM lists."""
        ...

    def get_deal(self, *, deal_id: str) -> Deal:
        """One deal; ``NotFoundError`` if it is gone."""
        ...


@dataclass(frozen=True)
class ItemResult:
    """What one item did, kept with its completion key: the deal, the outcome, the watch."""

    deal: str
    outcome: str
    watch_id: int | None = None

    def as_json(self) -> dict[str, object]:
        """The result as stored in ``step_completions.result``."""
        found: dict[str, object] = {"deal": self.deal, "outcome": self.outcome}
        if self.watch_id is not None or self.outcome in ("registered", "already_open"):
            found["watch_id"] = self.watch_id
        return found


def subject_for(item: DealItem, deal: Deal | None, settings: Settings) -> Subject:
    """What a watch copies: the CRM's record when it was read (its names are current), else the
    webhook item's own attributes."""
    if deal is not None:
        return subject_of(deal, settings)
    return Subject(
        subject_id=item.deal_id,
        name=str(item.name),
        stage=str(item.stage),
        account_name=item.account_name,
        assigned_user_id=item.assigned_user_id,
        assigned_user_name=item.assigned_user_name,
        crm_url=settings.crm_deal_url(item.deal_id),
    )


class ItemFailed(Exception):
    """One item could not be done; ``step`` names it for the dead letter. A ``permanent`` failure
    (a body that cannot be read) cannot succeed on a retry: it is dead-lettered at once."""

    def __init__(self, step: str, error: str, *, permanent: bool = False) -> None:
        super().__init__(error)
        self.step = step
        self.permanent = permanent


class Registrar:
    """Processes claimed events on one connection; ``counts`` are the run's business counts."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        crm: DealReader,
        settings: Settings,
        rng: random.Random | None = None,
        *,
        one_by_one: bool = False,
    ) -> None:
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            # Its claims must commit at once (leases, not locks held while the CRM is asked).
            raise StoreError("the Registrar needs a connection with no transaction open")
        self.conn = conn
        self.crm = crm
        self.settings = settings
        self.rng = rng or random.Random()  # noqa: S311 (backoff jitter)
        self.policy = stage_policy(settings)
        self.counts: Counter[str] = Counter()
        self._plan: Plan | None = None
        #: Every event's items one by one (the reference the tests hold ``all_at_once`` to).
        self.one_by_one = one_by_one

    def plan(self) -> Plan:
        """How new watches are planned, read when the first one opens: a missing cadence row
        fails the items that open watches (they wait, named), not the closes."""
        if self._plan is None:
            s = self.settings
            calendar = load_calendar(self.conn, s.holiday_country, s.holiday_subdivision)
            self._plan = load_plan(
                self.conn, cadence_name=s.cadence_name, time_zone=s.timezone, calendar=calendar
            )
        return self._plan

    def run(self, ids: Sequence[int] | None = None) -> Counter[str]:
        """Claim and process due events (or the named pending ones), batch by batch."""
        run = f"register-{uuid.uuid4().hex[:12]}"
        seen: list[int] = []
        for _ in range(MAX_BATCHES):
            if ids is not None:
                with self.conn.transaction():
                    batch = events.claim_ids(self.conn, ids, lease=LEASE, run=run)
            else:
                limit = self.settings.event_batch_size
                with self.conn.transaction():
                    batch = events.claim(self.conn, limit=limit, lease=LEASE, run=run, exclude=seen)
            for event in batch:
                seen.append(event.id)
                self.process(event)
            if not batch or ids is not None:
                break
        return self.counts

    def process(self, event: Event) -> None:
        """Do every item of one claimed event, then mark it done, retried or dead.

        The attempt is charged (committed) before the first item: an event that kills the
        worker still reaches its limit, and the untouched events of a batch are charged nothing.
        Any failure but a lost connection is this event's, never the run's.
        """
        self.counts["events_claimed"] += 1
        if event.attempts >= self.settings.event_max_attempts:
            # Every attempt was charged and none ended: the worker died on it each time. A dead
            # letter now, before it can kill this run too and hold back the events behind it.
            self.fail(
                event,
                "worker_died",
                f"the worker died during each of its {event.attempts} attempts",
                permanent=True,
            )
            return
        with self.conn.transaction():
            attempts = events.start_attempt(self.conn, event.id)
        event = dataclasses.replace(event, attempts=attempts)
        try:
            try:
                items = espocrm_items(event.event_type, bytes(event.body))
            except UnparseableBody as error:
                raise ItemFailed("parse", str(error), permanent=True) from None
            self.prefetch(items)
            with self.conn.transaction():
                done = events.completed_keys(self.conn, event.id)
            if not self.all_at_once(event, items, done):
                for item in items:  # one by one, each in a transaction of its own
                    self.item(event, item, done)
                with self.conn.transaction():
                    events.mark_done(self.conn, event.id)
        except ItemFailed as failed:
            self.fail(event, failed.step, str(failed), permanent=failed.permanent)
            return
        except Exception as error:
            if lost_connection(error, self.conn):
                raise  # the database is gone: the state is unclear, abort the run
            self.fail(event, "event", repr(error))
            return
        self.counts["events_done"] += 1

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
                max_attempts=1 if permanent else self.settings.event_max_attempts,
                delay=delay,
            )
        self.counts["events_dead" if dead else "events_retried"] += 1

    def item(self, event: Event, item: DealItem, done: set[str]) -> None:
        """One item: skip it if done (its key in ``done``), else decide and write it in a
        transaction of its own (the deal was read before it begins)."""
        if item.problem is not None:
            self.skip_invalid(event, item, item.problem)
            return
        step = self.step_of(item)
        key = self.key_of(event, item)
        if key in done:
            self.counts["items_already_done"] += 1
            return
        try:
            deal = self.read(item)
            with self.conn.transaction():
                result = self.apply(event, item, deal)
                events.complete(self.conn, key=key, event_id=event.id, result=result.as_json())
        except Exception as error:  # any error of an item but a lost connection: a retry
            if lost_connection(error, self.conn):
                raise  # the database is gone: the state is unclear, abort the run
            what = error if isinstance(error, IntegrationError) else repr(error)
            raise ItemFailed(f"{item.index}:{step}", f"deal {item.deal_id}: {what}") from None
        self.counts[result.outcome] += 1

    def all_at_once(self, event: Event, items: Sequence[DealItem], done: set[str]) -> bool:
        """Decide and write every item of the event together, and mark the event done, in one
        transaction of a few statements whatever their number (the common case: distinct deals,
        all read, so no CRM request is made while it holds locks); the same outcomes as one by
        one. False, with nothing written, when the event needs the items one by one: an item
        that is invalid, unread or shares its deal with another, or any error (then the items
        one by one find the one that fails, and keep the others). The counts are taken once
        the transaction committed."""
        deal_ids = [item.deal_id for item in items]
        if (
            self.one_by_one
            or self.unread is not None
            or len(set(deal_ids)) != len(deal_ids)
            or any(item.problem is not None for item in items)
            or any(self.needs_read(i) and i.deal_id not in self.deals for i in items)
        ):
            return False
        try:
            with self.conn.transaction():
                results = self.decide_all(event, items, done)
                events.mark_done(self.conn, event.id)
        except Exception as error:
            if lost_connection(error, self.conn):
                raise
            self.counts["events_one_by_one_after_error"] += 1
            return False
        if len(items) > len(results):
            self.counts["items_already_done"] += len(items) - len(results)
        self.counts.update(result.outcome for result in results.values())
        return True

    def decide_all(
        self, event: Event, items: Sequence[DealItem], done: set[str]
    ) -> dict[str, ItemResult]:
        """``apply`` for many items (distinct deals, read by ``prefetch``): three reads and
        three writes in all; the results by completion key, written with them."""
        received_at = event.received_at
        keys = {item.index: self.key_of(event, item) for item in items}
        undone = [item for item in items if keys[item.index] not in done]
        results: dict[str, ItemResult] = {}
        marking = []
        for item in undone:
            if item.stage is None and item.kind == "update":
                results[keys[item.index]] = ItemResult(item.deal_id, "ignored_no_stage")
            else:
                marking.append(item)
        marked = events.claim_marks(
            self.conn,
            deal_ids=[item.deal_id for item in marking],
            event_id=event.id,
            received_at=received_at,
        )
        closing: list[tuple[DealItem, Close]] = []
        opening: list[tuple[DealItem, Deal | None]] = []
        for item in marking:
            deal = self.deals.get(item.deal_id) if self.needs_read(item) else None
            if item.deal_id not in marked:
                results[keys[item.index]] = ItemResult(item.deal_id, "superseded")
                continue
            if item.kind == "delete":
                closing.append((item, Close("subject_gone")))
                continue
            decision = decide_for_stage(deal.stage if deal else item.stage, self.policy)
            if isinstance(decision, Close):
                closing.append((item, decision))
            else:
                opening.append((item, deal))
        open_now = {
            w.subject_id: w for w in open_watches_of(self.conn, [i.deal_id for i, _ in closing])
        }
        to_close: dict[int, CloseReason] = {}
        for item, decision in closing:
            watch = open_now.get(item.deal_id)
            key = keys[item.index]
            if watch is None:
                results[key] = ItemResult(item.deal_id, "nothing_to_close")
            elif watch.registered_at > received_at:  # opened after this event: it is stale
                results[key] = ItemResult(item.deal_id, "superseded", watch.id)
            else:
                to_close[watch.id] = decision.reason
                results[key] = ItemResult(item.deal_id, f"closed_{decision.reason}", watch.id)
        close_watches(self.conn, to_close, closed_at=received_at)
        latest = latest_watches_of(self.conn, [item.deal_id for item, _ in opening])
        subjects: list[Subject] = []
        for item, deal in opening:
            closed_at = latest[item.deal_id].closed_at if item.deal_id in latest else None
            if closed_at is not None and closed_at > received_at:
                results[keys[item.index]] = ItemResult(item.deal_id, "superseded")
            else:
                subjects.append(subject_for(item, deal, self.settings))
        opened = (
            open_watches_for(
                self.conn,
                subjects=subjects,
                plan=self.plan(),
                registered_at=received_at,
                registered_by="webhook",
                source_event_id=event.id,
            )
            if subjects
            else {}
        )
        for item, _ in opening:
            key = keys[item.index]
            if key not in results:
                watch_id = opened.get(item.deal_id)
                outcome = "registered" if watch_id is not None else "already_open"
                results[key] = ItemResult(item.deal_id, outcome, watch_id)
        events.complete_many(
            self.conn,
            event_id=event.id,
            results={key: result.as_json() for key, result in results.items()},
        )
        return results

    @classmethod
    def key_of(cls, event: Event, item: DealItem) -> str:
        """An item's completion key, ``{event_id}:{item}:{step}``."""
        return f"{event.id}:{item.index}:{cls.step_of(item)}"

    @staticmethod
    def step_of(item: DealItem) -> str:
        """The step an item's completion key names."""
        return "close" if item.kind == "delete" else "open"

    def skip_invalid(self, event: Event, item: DealItem, reason: str) -> None:
        """Record an item that cannot be done, with its reason (``followup dead-letters`` lists
        it), and go on with the others; a replay finds the record and skips it again."""
        key = f"{event.id}:{item.index}:invalid"
        result = {"deal": item.deal_id, "outcome": "invalid", "reason": storable(reason)}
        with self.conn.transaction():
            events.complete(self.conn, key=key, event_id=event.id, result=result)
        self.counts["items_invalid"] += 1

    @staticmethod
    def needs_read(item: DealItem) -> bool:
        """Whether the item's payload lacks what the CRM must tell (its stage or names)."""
        if item.problem is not None or item.kind == "delete":
            return False
        if item.stage is None and item.kind == "update":
            return False
        return item.stage is None or item.name is None

    def prefetch(self, items: Sequence[DealItem]) -> None:
        """Read every deal the event's items need in one ``id in (…)`` listing (a page per 50
        ids), not one request per item; a failure fails the event, to be retried."""
        ids = [item.deal_id for item in items if self.needs_read(item)]
        self.deals: dict[str, Deal] = {}
        self.broken: dict[str, str] = {}
        self.unread: str | None = None
        if not ids:
            return
        self.counts["crm_requests"] += -(-len(set(ids)) // IDS_PER_LISTING)
        try:
            listing = self.crm.list_deals_by_ids(ids=ids)
        except Exception as error:  # any error of the read but a lost connection
            if lost_connection(error, self.conn):
                raise
            # Each item that needs the CRM fails in its turn (and the event waits), as a read
            # of its own would have; deletes and complete payloads are applied.
            self.unread = str(error) if isinstance(error, IntegrationError) else repr(error)
            return
        self.deals = {deal.id: deal for deal in listing.records}
        self.broken = {str(e.record_id): str(e) for e in listing.invalid if e.record_id}

    def read(self, item: DealItem) -> Deal | Literal["gone"] | None:
        """The deal as the CRM listed it when the payload lacks its names; ``gone`` when the
        listing did not have it (deleted)."""
        if not self.needs_read(item):
            return None
        if self.unread is not None:
            raise UnreadDeal(f"the CRM could not list the event's deals: {self.unread}")
        if item.deal_id in self.broken:
            raise SchemaError(
                vendor="espocrm",
                record_id=item.deal_id,
                field="*",
                problem=self.broken[item.deal_id],
                raw=None,
            )
        if item.deal_id in self.deals:
            return self.deals[item.deal_id]
        # Not listed: deleted, or out of the API user's sight (a listing leaves those out where a
        # read answers 403). Asked on its own, a 404 says gone; anything else fails the item.
        self.counts["crm_requests"] += 1
        try:
            return self.crm.get_deal(deal_id=item.deal_id)
        except NotFoundError:
            return "gone"

    def apply(
        self, event: Event, item: DealItem, deal: Deal | Literal["gone"] | None
    ) -> ItemResult:
        """Open or close the deal's watch as its stage says; the result is kept with the key."""
        received_at = event.received_at
        if item.stage is None and item.kind == "update":
            return ItemResult(item.deal_id, "ignored_no_stage")
        if events.supersedes(
            self.conn, deal_id=item.deal_id, event_id=event.id, received_at=received_at
        ):
            return ItemResult(item.deal_id, "superseded")
        if item.kind == "delete" or deal == "gone":
            return self.close(item.deal_id, Close("subject_gone"), received_at)
        # Read from the CRM: its current stage is the truth, whatever this older payload says.
        stage = deal.stage if isinstance(deal, Deal) else item.stage
        decision = decide_for_stage(stage, self.policy)
        if isinstance(decision, Close):
            return self.close(item.deal_id, decision, received_at)
        latest = latest_watch_of(self.conn, item.deal_id)
        closed_at = latest.closed_at if latest is not None else None
        if closed_at is not None and closed_at > received_at:
            # A later event (or run) closed the deal's watch: this older event is stale.
            return ItemResult(item.deal_id, "superseded")
        known = deal if isinstance(deal, Deal) else None
        watch_id = open_watch(
            self.conn,
            subject=subject_for(item, known, self.settings),
            plan=self.plan(),
            registered_at=received_at,
            registered_by="webhook",
            source_event_id=event.id,
        )
        outcome = "registered" if watch_id is not None else "already_open"
        return ItemResult(item.deal_id, outcome, watch_id)

    def close(self, deal_id: str, decision: Close, received_at: datetime) -> ItemResult:
        """Close the deal's open watch for ``decision.reason`` (unless it opened later)."""
        watch = open_watch_of(self.conn, deal_id)
        if watch is None:
            return ItemResult(deal_id, "nothing_to_close")
        if watch.registered_at > received_at:  # opened after this event: the event is stale
            return ItemResult(deal_id, "superseded", watch.id)
        close_watch(self.conn, watch_id=watch.id, reason=decision.reason, closed_at=received_at)
        return ItemResult(deal_id, f"closed_{decision.reason}", watch.id)
