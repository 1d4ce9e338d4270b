"""Registration alongside other work: no lock is held while the CRM is asked, and two runs over
the same deals in opposite orders never deadlock."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from followup_pipeline.integrations.espocrm_models import Deal, DealListing
from followup_pipeline.settings import Settings
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
