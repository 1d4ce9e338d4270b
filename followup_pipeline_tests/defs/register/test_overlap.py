"""Registration alongside other work: no lock is held while the CRM is asked, two runs over the
same deals in opposite orders never deadlock, and two ``register`` runs at once (as the
``crm_events`` sensor launches them for a backlog) do each event once."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from followup_pipeline.defs import build_definitions
from followup_pipeline.defs.register import REGISTER_RUNS
from followup_pipeline.integrations.espocrm_models import Deal, DealListing
from followup_pipeline.integrations.resources import EspoCrmResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings, load_settings
from followup_pipeline.store.db import connection_kwargs
from followup_pipeline_tests.support import registering

from .conftest import EventFactory, FakeCrm


class HiddenCrm(FakeCrm):
    """The listing leaves out the ``hidden`` deals (out of the API user's sight); reading one
    alone waits for the test at ``barrier`` first."""

    def __init__(self, barrier: threading.Barrier) -> None:
        super().__init__()
        self.hidden: set[str] = set()
        self.barrier = barrier

    def list_deals_by_ids(self, *, ids: Sequence[str]) -> DealListing:
        listing = super().list_deals_by_ids(ids=ids)
        shown = [deal for deal in listing.records if deal.id not in self.hidden]
        return DealListing(records=shown, invalid=listing.invalid)

    def get_deal(self, *, deal_id: str) -> Deal:
        self.barrier.wait(timeout=10)
        time.sleep(0.2)
        return super().get_deal(deal_id=deal_id)


def _register(db_url: str, crm: FakeCrm, settings: Settings, ids: list[int]) -> dict[str, int]:
    with psycopg.connect(db_url, autocommit=True, **connection_kwargs()) as conn:
        return dict(registering(conn, crm, settings).run(ids=ids))


def test_overlap_no_lock_is_held_while_the_crm_is_asked(
    db_url: str, settings: Settings, add_event: EventFactory
) -> None:
    barrier = threading.Barrier(2)
    crm = HiddenCrm(barrier)
    crm.add("x", stage="Negotiation")
    crm.add("y", stage="Negotiation")
    crm.hidden = {"y"}
    event = add_event([{"id": "x", "name": "X", "stage": "Proposal"}, {"id": "y"}])
    counts: dict[str, int] = {}
    run = threading.Thread(target=lambda: counts.update(_register(db_url, crm, settings, [event])))
    run.start()
    barrier.wait(timeout=10)  # register asks the CRM about y alone now; x is written already
    with psycopg.connect(db_url, autocommit=True, **connection_kwargs()) as other:
        other.execute("SET lock_timeout = '200ms'")
        idle = other.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE state LIKE 'idle in transaction%%'"
        ).fetchone()
        # What evaluate's reconciler does for deal x meanwhile: no wait, and no row to add.
        opened = other.execute(
            "INSERT INTO watches (subject_id, subject_name, stage, cadence_name, offsets, "
            "time_zone, base_on, registered_at, registered_by) VALUES ('x', 'X', 'Proposal', "
            "'default', '{5}', 'UTC', current_date, now(), 'reconcile') "
            "ON CONFLICT (subject_type, subject_id) WHERE closed_at IS NULL DO NOTHING RETURNING id"
        ).fetchall()
    run.join(timeout=30)
    assert idle == {"n": 0}
    assert opened == []
    assert counts["registered"] == 2
    assert counts["events_done"] == 1


def test_overlap_two_runs_over_the_same_deals_in_opposite_orders_never_deadlock(
    db: psycopg.Connection[Any], db_url: str, settings: Settings, add_event: EventFactory
) -> None:
    crm = FakeCrm()
    deals = [f"d{n:04}" for n in range(400)]
    for deal_id in deals:
        crm.add(deal_id, stage="Negotiation")
    forward = add_event([{"id": d, "stage": "Negotiation"} for d in deals])
    backward = add_event([{"id": d, "stage": "Negotiation"} for d in reversed(deals)])
    results: list[dict[str, int]] = []
    for _ in range(5):
        db.execute(
            "UPDATE events SET status = 'pending', attempts = 0 WHERE id = ANY(%s)",
            ([forward, backward],),
        )
        db.execute("TRUNCATE step_completions, deal_marks, watches, watch_steps CASCADE")
        runs = [
            threading.Thread(
                target=lambda e=e: results.append(_register(db_url, crm, settings, [e]))
            )
            for e in (forward, backward)
        ]
        for run in runs:
            run.start()
        for run in runs:
            run.join(timeout=30)
    assert len(results) == 10
    assert all(r.get("events_done") == 1 and not r.get("events_retried") for r in results), results
    assert all(not r.get("events_one_by_one_after_error") for r in results), results


#: The sessions waiting for a lock on the events table.
WAITING_FOR_EVENTS = (
    "SELECT count(*) AS n FROM pg_locks WHERE relation = 'events'::regclass AND NOT granted"
)


def _backlog(add_event: EventFactory) -> list[int]:
    """300 webhooks in a shuffled order: 200 deals created once, and 20 deals changed five times
    each between two watched stages. Each carries the deal's name and stage: no CRM read."""
    deliveries = [
        ("Opportunity.create", {"id": f"d{n:03}", "name": f"D {n}", "stage": "Proposal"})
        for n in range(200)
    ]
    for n in range(20):
        for version in range(5):
            stage = ("Proposal", "Negotiation")[version % 2]
            item = {"id": f"r{n:02}", "name": f"R {n} v{version}", "stage": stage}
            deliveries.append(("Opportunity.update", item))
    random.Random(7).shuffle(deliveries)
    return [add_event([item], event=event) for event, item in deliveries]


def test_overlap_register_runs_at_once_do_each_event_exactly_once(
    db: psycopg.Connection[Any], db_url: str, add_event: EventFactory
) -> None:
    ids = _backlog(add_event)
    # Batches of 15: both runs claim some ten batches, and either could take the whole backlog.
    job = build_definitions(load_settings(event_batch_size=15)).resolve_job_def("register")
    outputs: list[dict[str, int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        resources = {
            "postgres": PostgresResource(url=db_url),
            "clock": ClockResource(),
            # Never asked: every item carries its names and stage.
            "espocrm": EspoCrmResource(base_url="http://127.0.0.1:9/espocrm", api_key="k"),
        }
        try:
            result = job.execute_in_process(resources=resources)
            outputs.append(result.output_for_node("register_events"))
        except BaseException as error:
            errors.append(error)

    runs = [threading.Thread(target=run) for _ in range(REGISTER_RUNS)]
    watcher = psycopg.connect(db_url, autocommit=True, **connection_kwargs())
    with watcher, db.transaction():
        # Hold every claim until all runs wait at their first one: they start together.
        db.execute("LOCK TABLE events IN EXCLUSIVE MODE")
        for thread in runs:
            thread.start()
        deadline = time.monotonic() + 30
        while watcher.execute(WAITING_FOR_EVENTS).fetchone() != {"n": REGISTER_RUNS}:
            assert time.monotonic() < deadline, "the runs never reached their first claim"
            time.sleep(0.01)
    for thread in runs:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(outputs) == REGISTER_RUNS

    # Each event handed to one run once, done in its one attempt.
    assert sum(counts["events_claimed"] for counts in outputs) == len(ids)
    assert sum(counts["events_done"] for counts in outputs) == len(ids)
    states = db.execute(
        "SELECT status, attempts, count(*) AS n FROM events GROUP BY status, attempts"
    ).fetchall()
    assert states == [{"status": "done", "attempts": 1, "n": len(ids)}]
    # Each event's completion recorded once (its one item).
    completions = db.execute(
        "SELECT count(*) AS n, count(DISTINCT event_id) AS events FROM step_completions"
    ).fetchone()
    assert completions == {"n": len(ids), "events": len(ids)}
    # Both runs did a share: the claims of each run name it.
    shares = db.execute("SELECT count(*) AS n FROM events GROUP BY claimed_by").fetchall()
    assert len(shares) == REGISTER_RUNS
    assert min(row["n"] for row in shares) >= 15, shares
    # One watch per deal, opened once: 220 deals, none with a second watch.
    watches = db.execute(
        "SELECT count(*) AS n, count(DISTINCT subject_id) AS deals, "
        "count(*) FILTER (WHERE closed_at IS NULL) AS open FROM watches"
    ).fetchone()
    assert watches == {"n": 220, "deals": 220, "open": 220}
    assert sum(counts["registered"] for counts in outputs) == 220
