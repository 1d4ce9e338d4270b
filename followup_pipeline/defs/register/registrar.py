"""Registration from the event log: the handler of EspoCRM's events on the engine's worker.

The worker (``engine/worker.py``) claims, charges attempts, backs off and dead-letters; this
handler reads each event's deals from the CRM (one listing per 50 deals) and decides every item
by the one set of rules (``domain/registration.py``), applied by ``apply_registrations``. The
common event (distinct deals, all listed) is written whole in one transaction of a few
statements, its deal marks taken in the deals' order so two runs cannot deadlock. Any other
event, or one whose statements together fail, is done item by item: each item a list of one in
a transaction of its own, so an item that fails is rolled back alone and those before it kept.
An error of the database itself (``engine/run_stops.py``) is no item's: it goes up to the
worker, which stops the run (a conflict with another run it first retries once).

Each item's write is committed with its completion key ``{event_id}:{item}:{step}``; opening is
``ON CONFLICT DO NOTHING``, so a redelivery never resets a running cadence. Order: a deal read
from the CRM is decided by its current stage; each deal keeps a mark of the newest event
applied, so an older event that arrives (or is replayed) later is ``superseded``.
"""

from collections import Counter
from collections.abc import Sequence
from typing import Any

import psycopg

from followup_pipeline.defs.register.items import (
    DealReader,
    ItemResult,
    Read,
    UnreadDeal,
    needs_read,
    result_of,
    step_of,
    subject_for,
)
from followup_pipeline.domain.registration import Observation, Subject, decide, stage_policy
from followup_pipeline.engine.run_stops import database_fault
from followup_pipeline.engine.worker import ItemFailed, completion_key
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError, SchemaError
from followup_pipeline.integrations.espocrm import IDS_PER_LISTING
from followup_pipeline.integrations.espocrm_models import Deal
from followup_pipeline.integrations.espocrm_webhooks import (
    DealItem,
    UnparseableBody,
    espocrm_items,
)
from followup_pipeline.settings import Settings
from followup_pipeline.store import events
from followup_pipeline.store.cadences import Plans, load_plans
from followup_pipeline.store.db import storable
from followup_pipeline.store.events import Event
from followup_pipeline.store.holidays import load_calendar
from followup_pipeline.store.watches import apply_registrations, latest_watches_of


class Registrar:
    """Handles EspoCRM's events on one connection; ``counts`` are the run's business counts."""

    def __init__(self, conn: psycopg.Connection[Any], crm: DealReader, settings: Settings) -> None:
        self.conn = conn
        self.crm = crm
        self.settings = settings
        self.policy = stage_policy(settings)
        self.counts: Counter[str] = Counter()
        self._plan: Plans | None = None
        self.deals: dict[str, Deal] = {}
        self.broken: dict[str, str] = {}
        self.unread: str | None = None

    def plan(self) -> Plans:
        """How new watches are planned (per stage), read when the first one opens: a missing
        cadence row fails the items that open watches (they wait, named), not the closes."""
        if self._plan is None:
            s = self.settings
            calendar = load_calendar(self.conn, s.holiday_country, s.holiday_subdivision)
            self._plan = load_plans(self.conn, s, calendar=calendar)
        return self._plan

    def handle(self, event: Event, done: set[str]) -> bool:
        """Every item of one claimed event: all at once when it can, else one by one."""
        try:
            items = espocrm_items(event.event_type, bytes(event.body))
        except UnparseableBody as error:
            raise ItemFailed("parse", str(error), permanent=True) from None
        self.prefetch(items)
        if self.all_at_once(event, items, done):
            return True
        for item in items:  # one by one, each in a transaction of its own
            self.item(event, item, done)
        return False

    @staticmethod
    def key_of(event: Event, item: DealItem) -> str:
        """An item's completion key, ``{event_id}:{item}:{step}``."""
        return completion_key(event.id, item.index, step_of(item))

    def item(self, event: Event, item: DealItem, done: set[str]) -> None:
        """One item: skip it if done, else decide and write it as a list of one, in a
        transaction of its own (the deal was read before it begins)."""
        if item.problem is not None:
            self.skip_invalid(event, item, item.problem)
            return
        key = self.key_of(event, item)
        if key in done:
            self.counts["items_already_done"] += 1
            return
        try:
            deal = self.read(item)
            with self.conn.transaction():
                [result] = self.register(event, [(item, deal)]).values()
        except Exception as error:  # any error of an item but the database's own: a retry
            if database_fault(error, self.conn):
                raise  # the worker's to judge: the state is unclear, the run stops
            what = error if isinstance(error, IntegrationError) else repr(error)
            step = f"{item.index}:{step_of(item)}"
            raise ItemFailed(step, f"deal {item.deal_id}: {what}") from None
        self.counts[result.outcome] += 1

    def all_at_once(self, event: Event, items: Sequence[DealItem], done: set[str]) -> bool:
        """Decide and write every item of the event together, and mark the event done, in one
        transaction (the common case: distinct deals, all read, so no CRM request is made while
        it holds locks). False, with nothing written, when the event needs the items one by
        one: an item that is invalid, unread or shares its deal with another, or an error
        that is not the database's own (that one goes up to the worker)."""
        deal_ids = [item.deal_id for item in items]
        if (
            self.unread is not None
            or len(set(deal_ids)) != len(deal_ids)
            or any(item.problem is not None for item in items)
            or any(needs_read(i) and i.deal_id not in self.deals for i in items)
        ):
            return False
        undone = [item for item in items if self.key_of(event, item) not in done]
        read = [
            (item, self.deals.get(item.deal_id) if needs_read(item) else None) for item in undone
        ]
        try:
            with self.conn.transaction():
                results = self.register(event, read)
                events.mark_done(self.conn, event.id)
        except Exception as error:
            if database_fault(error, self.conn):
                raise
            self.counts["events_one_by_one_after_error"] += 1
            return False
        if len(items) > len(results):
            self.counts["items_already_done"] += len(items) - len(results)
        self.counts.update(result.outcome for result in results.values())
        return True

    def register(
        self, event: Event, read: Sequence[tuple[DealItem, Read]]
    ) -> dict[str, ItemResult]:
        """Decide and apply items of distinct deals (inside the caller's transaction), and
        record each with its completion key; the results by key."""
        at = event.received_at
        keys = {item.index: self.key_of(event, item) for item, _ in read}
        results: dict[str, ItemResult] = {}
        marking: list[tuple[DealItem, Read]] = []
        for item, deal in read:
            if item.stage is None and item.kind == "update":
                results[keys[item.index]] = ItemResult(item.deal_id, "ignored_no_stage")
            else:
                marking.append((item, deal))
        marked = events.claim_marks(
            self.conn, deal_ids=[i.deal_id for i, _ in marking], event_id=event.id, received_at=at
        )
        observed: list[Observation] = []
        subjects: dict[str, Subject] = {}
        for item, deal in marking:
            if item.deal_id not in marked:
                results[keys[item.index]] = ItemResult(item.deal_id, "superseded")
                continue
            # Read from the CRM: its current stage is the truth, whatever this payload says.
            gone = item.kind == "delete" or deal == "gone"
            known = deal if isinstance(deal, Deal) else None
            stage = None if gone else (known.stage if known else item.stage)
            observed.append(Observation(item.deal_id, stage, at, "webhook"))
            if not gone:
                subjects[item.deal_id] = subject_for(item, known, self.settings)
        latest = latest_watches_of(self.conn, [o.subject_id for o in observed])
        decided = decide(observed, latest, self.policy)
        ended = apply_registrations(
            self.conn,
            decided,
            subjects=subjects,
            plan=self.plan() if any(r.action == "open" for r in decided) else None,
            at=at,
            registered_by="webhook",
            source_event_id=event.id,
        )
        by_deal = {item.deal_id: item for item, _ in marking}
        for registration in ended.values():
            item = by_deal[registration.subject_id]
            results[keys[item.index]] = result_of(registration)
        events.complete_many(
            self.conn,
            event_id=event.id,
            results={key: result.as_json() for key, result in results.items()},
        )
        return results

    def skip_invalid(self, event: Event, item: DealItem, reason: str) -> None:
        """Record an item that cannot be done, with its reason (``followup dead-letters`` lists
        it), and go on with the others; a replay finds the record and skips it again."""
        key = completion_key(event.id, item.index, "invalid")
        result = {"deal": item.deal_id, "outcome": "invalid", "reason": storable(reason)}
        with self.conn.transaction():
            events.complete(self.conn, key=key, event_id=event.id, result=result)
        self.counts["items_invalid"] += 1

    def prefetch(self, items: Sequence[DealItem]) -> None:
        """Read every deal the event's items need in one ``id in (…)`` listing (a page per 50
        ids), not one request per item; a failure fails the event, to be retried."""
        ids = [item.deal_id for item in items if needs_read(item)]
        self.deals, self.broken, self.unread = {}, {}, None
        if not ids:
            return
        self.counts["crm_requests"] += -(-len(set(ids)) // IDS_PER_LISTING)
        try:
            listing = self.crm.list_deals_by_ids(ids=ids)
        except Exception as error:  # any error of the read but the database's own
            if database_fault(error, self.conn):
                raise
            # Each item that needs the CRM fails in its turn (and the event waits), as a read
            # of its own would have; deletes and complete payloads are applied.
            self.unread = str(error) if isinstance(error, IntegrationError) else repr(error)
            return
        self.deals = {deal.id: deal for deal in listing.records}
        self.broken = {str(e.record_id): str(e) for e in listing.invalid if e.record_id}

    def read(self, item: DealItem) -> Read:
        """The deal as the CRM listed it when the payload lacks its names; ``gone`` when the
        listing did not have it (deleted)."""
        if not needs_read(item):
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
