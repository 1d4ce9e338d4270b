"""Registration from the event log: claim due events, open or close watches item by item.

Each item's write is keyed ``{event_id}:{item}:{step}`` in ``step_completions`` and done in a
savepoint with its key, so a retry or a replay (same event id) skips what is done. EspoCRM
re-batches failed items with newer ones, so this per-item idempotency carries the load; opening
is also ``ON CONFLICT DO NOTHING``, so a redelivery never resets a running cadence.

Failures: a vendor error (``IntegrationError``) or an unreadable body stops the event at that
item; the event's attempts rise and it waits with backoff, or becomes a dead letter after the
last attempt. A database error aborts the run (the state is unclear).
"""

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import psycopg

from followup_pipeline.domain.decisions import Close, StagePolicy, decide_for_stage
from followup_pipeline.ingress.payloads import DealItem, UnparseableBody, espocrm_items
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError
from followup_pipeline.integrations.espocrm_models import Deal
from followup_pipeline.settings import Settings
from followup_pipeline.store import events
from followup_pipeline.store.watches import (
    Plan,
    Subject,
    close_watch,
    latest_watch_of,
    load_calendar,
    open_watch,
    open_watch_of,
)

#: Batches one run claims at most, so a flood cannot keep a run going for ever.
MAX_BATCHES = 20
CADENCE_NAME = "default"


class DealReader(Protocol):
    """What registration needs from the CRM: one deal by id."""

    def get_deal(self, *, deal_id: str) -> Deal:
        """One deal; ``NotFoundError`` if it is gone."""
        ...


class ItemFailed(Exception):
    """One item could not be done; ``step`` names it for the dead letter."""

    def __init__(self, step: str, error: str) -> None:
        super().__init__(error)
        self.step = step


def crm_url(settings: Settings, deal_id: str) -> str:
    """The deal's page in EspoCRM's web UI."""
    base = str(settings.espocrm_url).rstrip("/").removesuffix("/api/v1")
    return f"{base}/#Opportunity/view/{deal_id}"


class Registrar:
    """Processes claimed events on one connection; ``counts`` are the run's business counts."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        crm: DealReader,
        settings: Settings,
        rng: random.Random | None = None,
    ) -> None:
        self.conn = conn
        self.crm = crm
        self.settings = settings
        self.rng = rng or random.Random()  # noqa: S311 (backoff jitter)
        self.policy = StagePolicy(settings.watched_stages, settings.won_stage, settings.lost_stage)
        self.counts: Counter[str] = Counter()
        with conn.transaction():
            calendar = load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)
        self.plan = Plan(CADENCE_NAME, tuple(settings.cadence), settings.timezone, calendar)

    def run(self, ids: Sequence[int] | None = None) -> Counter[str]:
        """Claim and process due events (or the named pending ones), batch by batch."""
        seen: list[int] = []
        for _ in range(MAX_BATCHES):
            with self.conn.transaction():
                if ids is not None:
                    batch = events.claim_ids(self.conn, ids)
                else:
                    limit = self.settings.event_batch_size
                    batch = events.claim(self.conn, limit=limit, exclude=seen)
                for event in batch:
                    seen.append(int(event["id"]))
                    self.process(event)
            if not batch or ids is not None:
                break
        return self.counts

    def process(self, event: Mapping[str, Any]) -> None:
        """Do every item of one claimed event, then mark it done, retried or dead."""
        self.counts["events_claimed"] += 1
        try:
            try:
                items = espocrm_items(event["event_type"], bytes(event["body"]))
            except UnparseableBody as error:
                raise ItemFailed("parse", str(error)) from None
            for item in items:
                self.item(event, item)
        except ItemFailed as failed:
            delay = events.backoff(
                int(event["attempts"]) + 1,
                base_s=self.settings.event_backoff_base_s,
                max_s=self.settings.event_backoff_max_s,
                rng=self.rng,
            )
            dead = events.mark_failed(
                self.conn,
                event=event,
                step=failed.step,
                error=str(failed),
                max_attempts=self.settings.event_max_attempts,
                delay=delay,
            )
            self.counts["events_dead" if dead else "events_retried"] += 1
            return
        events.mark_done(self.conn, int(event["id"]))
        self.counts["events_done"] += 1

    def item(self, event: Mapping[str, Any], item: DealItem) -> None:
        """One item: skip it if done, else decide and write it with its completion key."""
        step = "close" if item.kind == "delete" else "open"
        key = f"{event['id']}:{item.index}:{step}"
        if events.completion(self.conn, key) is not None:
            self.counts["items_already_done"] += 1
            return
        try:
            with self.conn.transaction():
                result = self.apply(event, item)
                events.complete(self.conn, key=key, event_id=int(event["id"]), result=result)
        except IntegrationError as error:
            raise ItemFailed(f"{item.index}:{step}", f"deal {item.deal_id}: {error}") from None
        self.counts[str(result["outcome"])] += 1

    def apply(self, event: Mapping[str, Any], item: DealItem) -> dict[str, Any]:
        """Open or close the deal's watch as its stage says; the result is kept with the key."""
        received_at: datetime = event["received_at"]
        stage, deal = item.stage, None
        if item.kind == "delete":
            return self.close(item.deal_id, Close("subject_gone"), received_at)
        if stage is None and item.kind == "update":
            return {"deal": item.deal_id, "outcome": "ignored_no_stage"}
        if stage is None or item.name is None:
            try:
                deal = self.crm.get_deal(deal_id=item.deal_id)
            except NotFoundError:
                return self.close(item.deal_id, Close("subject_gone"), received_at)
            stage = stage or deal.stage
        decision = decide_for_stage(stage, self.policy)
        if isinstance(decision, Close):
            return self.close(item.deal_id, decision, received_at)
        latest = latest_watch_of(self.conn, item.deal_id)
        closed_at = latest["closed_at"] if latest is not None else None
        if closed_at is not None and closed_at > received_at:
            # A later event (or run) closed the deal's watch: this older event is stale.
            return {"deal": item.deal_id, "outcome": "superseded"}
        subject = Subject(
            subject_id=item.deal_id,
            name=deal.name if deal else str(item.name),
            stage=stage,
            account_name=deal.account_name if deal else item.account_name,
            assigned_user_id=deal.assigned_user_id if deal else item.assigned_user_id,
            assigned_user_name=deal.assigned_user_name if deal else item.assigned_user_name,
            crm_url=crm_url(self.settings, item.deal_id),
        )
        watch_id = open_watch(
            self.conn,
            subject=subject,
            plan=self.plan,
            registered_at=received_at,
            registered_by="webhook",
            source_event_id=int(event["id"]),
        )
        outcome = "registered" if watch_id is not None else "already_open"
        return {"deal": item.deal_id, "outcome": outcome, "watch_id": watch_id}

    def close(self, deal_id: str, decision: Close, received_at: datetime) -> dict[str, Any]:
        """Close the deal's open watch for ``decision.reason`` (unless it opened later)."""
        watch = open_watch_of(self.conn, deal_id)
        if watch is None:
            return {"deal": deal_id, "outcome": "nothing_to_close"}
        if watch["registered_at"] > received_at:  # opened after this event: the event is stale
            return {"deal": deal_id, "outcome": "superseded", "watch_id": watch["id"]}
        close_watch(
            self.conn, watch_id=int(watch["id"]), reason=decision.reason, closed_at=received_at
        )
        return {"deal": deal_id, "outcome": f"closed_{decision.reason}", "watch_id": watch["id"]}
