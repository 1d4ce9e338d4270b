"""Registration from the event log: decisions per item, idempotency, retries and dead letters."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from followup_pipeline.settings import Settings, load_settings
from followup_pipeline.store.dead_letters import requeue_events
from followup_pipeline_tests.support import registering

from .conftest import EventFactory, FakeCrm


def _watches(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(db.execute("SELECT * FROM watches ORDER BY id").fetchall())


def _event(db: psycopg.Connection[Any], event_id: int) -> dict[str, Any]:
    row = db.execute("SELECT * FROM events WHERE id = %s", (event_id,)).fetchone()
    assert row is not None
    return dict(row)


def _run(db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings) -> dict[str, int]:
    return dict(registering(db, crm, settings).run())


def test_registrar_create_opens_a_watch_from_the_payload_names(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    item = {"id": "d1", "name": "Offer", "stage": "Proposal", "accountName": "ACME"}
    event_id = add_event([item], event="Opportunity.create")
    counts = _run(db, crm, settings)
    assert counts == {"events_claimed": 1, "events_done": 1, "registered": 1}
    assert crm.calls == []
    [watch] = _watches(db)
    assert (watch["subject_name"], watch["account_name"], watch["source_event_id"]) == (
        "Offer",
        "ACME",
        event_id,
    )
    assert watch["registered_at"] == _event(db, event_id)["received_at"]
    assert watch["crm_url"] == "https://crm.example.com/#Opportunity/view/d1"
    steps = db.execute("SELECT count(*) AS n FROM watch_steps").fetchone()
    assert steps == {"n": 3}
    assert _event(db, event_id)["status"] == "done"


def test_registrar_stage_update_reads_the_names_from_the_crm(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    crm.add("d1", name="From the CRM", stage="Negotiation")
    add_event([{"id": "d1", "stage": "Negotiation"}])
    assert _run(db, crm, settings)["registered"] == 1
    [watch] = _watches(db)
    assert (watch["subject_name"], watch["stage"], watch["assigned_user_name"]) == (
        "From the CRM",
        "Negotiation",
        "Ada",
    )


@pytest.mark.parametrize(
    ("event", "item", "reason"),
    [
        ("Opportunity.fieldUpdate.stage", {"id": "d1", "stage": "Closed Won"}, "won"),
        ("Opportunity.fieldUpdate.stage", {"id": "d1", "stage": "Closed Lost"}, "lost"),
        ("Opportunity.update", {"id": "d1", "stage": "Qualification"}, "out_of_scope"),
        ("Opportunity.delete", {"id": "d1"}, "subject_gone"),
    ],
)
def test_registrar_closes_with_the_stage_reason(
    db: psycopg.Connection[Any],
    crm: FakeCrm,
    settings: Settings,
    add_event: EventFactory,
    event: str,
    item: dict[str, Any],
    reason: str,
) -> None:
    crm.add("d1")
    add_event([{"id": "d1", "stage": "Proposal"}])
    assert _run(db, crm, settings)["registered"] == 1
    if "stage" in item:
        crm.add("d1", stage=item["stage"])  # the CRM moves on with the deal
    add_event([item], event=event)
    counts = _run(db, crm, settings)
    assert counts[f"closed_{reason}"] == 1
    [watch] = _watches(db)
    assert watch["closed_reason"] == reason


@pytest.mark.parametrize(
    ("stage", "outcome", "watches"),
    [("Proposal", "not_reopened_exhausted", 1), ("Negotiation", "registered", 2)],
)
def test_registrar_after_exhausted_opens_only_in_another_stage(
    db: psycopg.Connection[Any],
    crm: FakeCrm,
    settings: Settings,
    add_event: EventFactory,
    stage: str,
    outcome: str,
    watches: int,
) -> None:
    """The rule reconciliation applies too (test_evaluate): a deal exhausted in a stage gets no
    new watch there, and one once it moved on to another watched stage."""
    crm.add("d1", stage="Proposal")
    add_event([{"id": "d1", "stage": "Proposal"}])
    _run(db, crm, settings)
    # Weeks later (the same body an hour apart would be a redelivery): exhausted, then news.
    db.execute("UPDATE events SET received_at = received_at - interval '2 hours'")
    db.execute("UPDATE watches SET closed_at = now(), closed_reason = 'exhausted'")
    crm.add("d1", stage=stage)
    add_event([{"id": "d1", "stage": stage}], event="Opportunity.fieldUpdate.stage")
    assert _run(db, crm, settings)[outcome] == 1
    assert len(_watches(db)) == watches


def test_registrar_update_without_a_stage_changes_nothing(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    add_event([{"id": "d1", "name": "Renamed"}], event="Opportunity.update")
    assert _run(db, crm, settings)["ignored_no_stage"] == 1
    assert _watches(db) == []


def test_registrar_later_redelivery_keeps_the_running_cadence(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    crm.add("d1")
    add_event([{"id": "d1", "stage": "Proposal"}])
    _run(db, crm, settings)
    before = db.execute("SELECT id, due_on FROM watch_steps ORDER BY id").fetchall()
    db.execute("UPDATE events SET received_at = received_at - interval '2 hours'")
    add_event([{"id": "d1", "stage": "Proposal"}])  # the same body, later: a new event
    assert _run(db, crm, settings)["already_open"] == 1
    assert len(_watches(db)) == 1
    assert db.execute("SELECT id, due_on FROM watch_steps ORDER BY id").fetchall() == before


def test_registrar_a_failed_item_waits_and_finished_items_are_skipped(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    crm.add("d1")
    crm.add("d2")
    crm.invalid.add("d2")  # the CRM lists it, but the record breaks its schema
    event_id = add_event([{"id": "d1", "stage": "Proposal"}, {"id": "d2", "stage": "Proposal"}])
    slow = settings.model_copy(update={"event_backoff_base_s": 60.0})
    counts = _run(db, crm, slow)
    assert (counts["registered"], counts["events_retried"]) == (1, 1)
    event = _event(db, event_id)
    assert (event["status"], event["attempts"], event["dead_step"]) == ("pending", 1, "1:open")
    assert "deal d2" in event["last_error"]
    waited = db.execute(
        "SELECT next_attempt_at - now() AS wait FROM events WHERE id = %s", (event_id,)
    ).fetchone()
    assert waited is not None
    assert 40 < waited["wait"].total_seconds() < 80
    assert _run(db, crm, slow) == {}  # not due yet
    crm.invalid.clear()
    db.execute("UPDATE events SET next_attempt_at = now()")
    counts = _run(db, crm, slow)
    assert (counts["items_already_done"], counts["registered"]) == (1, 1)
    assert len(_watches(db)) == 2


def test_registrar_dead_letters_after_the_last_attempt_and_replay_registers_once(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    crm.add("d1")
    crm.failing.add("d1")
    event_id = add_event([{"id": "d1", "stage": "Proposal"}])
    for _ in range(settings.event_max_attempts):
        _run(db, crm, settings)
    event = _event(db, event_id)
    assert (event["status"], event["attempts"], event["dead_step"]) == ("dead", 5, "0:open")
    assert "answered 503" in event["last_error"]
    assert _run(db, crm, settings) == {}
    crm.failing.clear()
    assert requeue_events(db, [event_id]) == ([event_id], {})
    assert registering(db, crm, settings).run(ids=[event_id])["registered"] == 1
    assert requeue_events(db, [event_id]) == ([], {event_id: "not a dead letter (status done)"})
    assert len(_watches(db)) == 1


def test_registrar_stale_close_does_not_close_a_later_watch(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    crm.add("d1")
    lost = add_event([{"id": "d1", "stage": "Closed Lost"}])
    db.execute("UPDATE events SET received_at = now() - interval '5 minutes'")
    db.execute(
        "UPDATE events SET next_attempt_at = now() + interval '1 hour' WHERE id = %s", (lost,)
    )
    add_event([{"id": "d1", "stage": "Proposal"}])
    _run(db, crm, settings)
    db.execute("UPDATE events SET next_attempt_at = now() WHERE id = %s", (lost,))
    assert _run(db, crm, settings)["superseded"] == 1
    [watch] = _watches(db)
    assert watch["closed_at"] is None


def test_registrar_an_unexpected_error_fails_one_event_not_the_run(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    crm.broken.add("bad")
    crm.add("good", name="Good", stage="Proposal")
    bad = add_event([{"id": "bad", "stage": "Proposal"}])
    nul = add_event([{"id": "nul", "name": "A\u0000B", "stage": "Proposal"}], "Opportunity.create")
    good = add_event([{"id": "good", "stage": "Proposal"}])
    counts = _run(db, crm, settings)
    assert (counts["events_retried"], counts["events_done"], counts["registered"]) == (1, 2, 2)
    assert "ValueError" in _event(db, bad)["last_error"]
    # A NUL in a name is a control character: removed at the item (issue 10), not a failure.
    assert _event(db, nul)["status"] == "done"
    assert _event(db, good)["status"] == "done"
    assert sorted((w["subject_id"], w["subject_name"]) for w in _watches(db)) == [
        ("good", "Good"),
        ("nul", "AB"),
    ]


def test_registrar_an_older_event_after_a_newer_close_changes_nothing(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    older = add_event([{"id": "d1", "name": "Offer", "stage": "Proposal"}], "Opportunity.update")
    newer = add_event([{"id": "d1", "name": "Offer", "stage": "Closed Won"}], "Opportunity.update")
    db.execute(
        "UPDATE events SET next_attempt_at = now() + interval '1 hour' WHERE id = %s", (older,)
    )
    assert _run(db, crm, settings)["nothing_to_close"] == 1  # the newer one, first
    db.execute("UPDATE events SET next_attempt_at = now() WHERE id = %s", (older,))
    assert _run(db, crm, settings)["superseded"] == 1  # the older one arrives late
    assert _watches(db) == []
    assert _event(db, newer)["status"] == "done"


def test_registrar_stage_read_from_the_crm_wins_over_the_payload(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    crm.add("d1", name="Won since", stage="Closed Won")
    add_event([{"id": "d1", "stage": "Proposal"}])  # a stage change that is already history
    assert _run(db, crm, settings)["nothing_to_close"] == 1
    assert _watches(db) == []


def test_registrar_backoff_counts_from_the_failure_not_the_claim(
    db: psycopg.Connection[Any], crm: FakeCrm, add_event: EventFactory
) -> None:
    settings = load_settings(event_backoff_base_s=2, espocrm_url="https://crm.example.com")
    crm.failing.add("d1")
    crm.delay_s = 2.5  # the CRM takes longer to fail than the first backoff
    event_id = add_event([{"id": "d1", "stage": "Proposal"}])
    _run(db, crm, settings)
    row = db.execute(
        "SELECT next_attempt_at > now() AS waiting, attempts FROM events WHERE id = %s",
        (event_id,),
    ).fetchone()
    assert row == {"waiting": True, "attempts": 1}


def test_registrar_a_claim_holds_no_lock_and_a_dead_run_frees_it(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    from datetime import timedelta

    from followup_pipeline.store.events import claim, store_delivery

    event_id = add_event([{"id": "d1", "name": "Offer", "stage": "Proposal"}], "Opportunity.create")
    with db.transaction():
        [claimed] = claim(
            db, limit=10, lease=timedelta(minutes=15), run="a-run-that-dies", sources=["espocrm"]
        )
    assert claimed.id == event_id
    # A redelivery while the claim stands is counted at once: no row lock to wait for.
    body = bytes(claimed.body)
    with db.transaction():
        again = store_delivery(
            db, source="espocrm", event_type="Opportunity.create", body=body, headers={}
        )
    assert again.duplicate
    assert _run(db, crm, settings) == {}  # leased: nobody else takes it
    db.execute("UPDATE events SET claimed_until = now() - interval '1 second'")  # the lease ran out
    assert _run(db, crm, settings)["registered"] == 1
    # The dead run only claimed it, never started it: it is charged nothing (issue 10).
    assert _event(db, event_id)["attempts"] == 1


def test_registrar_reads_an_events_deals_in_one_listing(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    for n in range(49):
        crm.add(f"d{n}")
    # EspoCRM's stage webhook names no deal: 50 items, one deleted meanwhile (not listed).
    event_id = add_event([{"id": f"d{n}", "stage": "Proposal"} for n in range(50)])
    counts = _run(db, crm, settings)
    assert crm.listings == 1
    # The one deal the listing left out is asked on its own: a 404, gone.
    assert (counts["registered"], counts["nothing_to_close"], counts["crm_requests"]) == (49, 1, 2)
    assert _event(db, event_id)["status"] == "done"


def _outcomes(db: psycopg.Connection[Any]) -> tuple[list[Any], list[Any]]:
    completions = db.execute("SELECT key, result FROM step_completions ORDER BY key").fetchall()
    watches = db.execute(
        "SELECT id, subject_id, subject_name, stage, closed_reason, source_event_id, "
        "(SELECT array_agg(due_on ORDER BY step_no) FROM watch_steps s WHERE s.watch_id = w.id) "
        "AS due FROM watches w ORDER BY id"
    ).fetchall()
    return completions, watches


def test_registrar_decides_every_kind_of_outcome_as_the_rules_say(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    """Five events whose items reach every kind of outcome, written all at once where they can
    be and one by one where they cannot (event 5 has an item that needs the CRM and is not
    listed): the completions and watches the rules give (``domain/registration.py``)."""
    for deal_id, stage in [("d1", "Closed Won"), ("d2", "Negotiation"), ("d4", "Negotiation")]:
        crm.add(deal_id, stage=stage)
    crm.add("d5", stage="Prospecting")
    create = [{"id": d, "name": f"Offer {d}", "stage": "Proposal"} for d in ("d1", "d2", "d3")]
    add_event(create, event="Opportunity.create")
    add_event([{"id": d, "stage": "Negotiation"} for d in ("d1", "d2", "d4", "d5")])
    add_event([{"id": "d3", "name": "Renamed"}], event="Opportunity.update")
    newer = add_event([{"id": "d3"}], event="Opportunity.delete")
    # Received before the delete, stored after it: stale for d3, news for d6 (not in the CRM).
    stale = add_event(
        [{"id": "d3", "name": "Late", "stage": "Proposal"}, {"id": "d6", "name": "New"}],
        event="Opportunity.create",
    )
    db.execute(
        "UPDATE events SET received_at = (SELECT received_at FROM events WHERE id = %s) "
        "- interval '1 second' WHERE id = %s",
        (newer, stale),
    )
    counts = _run(db, crm, settings)
    completions, watches = _outcomes(db)
    assert counts == {
        "events_claimed": 5,
        "events_done": 5,
        "registered": 4,
        "already_open": 1,
        "closed_won": 1,
        "closed_subject_gone": 1,
        "ignored_no_stage": 1,
        "nothing_to_close": 2,
        "superseded": 1,
        "crm_requests": 3,
    }
    by_key = {row["key"]: (row["result"]["deal"], row["result"]["outcome"]) for row in completions}
    assert by_key == {
        "1:0:open": ("d1", "registered"),
        "1:1:open": ("d2", "registered"),
        "1:2:open": ("d3", "registered"),
        "2:0:open": ("d1", "closed_won"),
        "2:1:open": ("d2", "already_open"),
        "2:2:open": ("d4", "registered"),
        "2:3:open": ("d5", "nothing_to_close"),
        "3:0:open": ("d3", "ignored_no_stage"),
        "4:0:close": ("d3", "closed_subject_gone"),
        "5:0:open": ("d3", "superseded"),
        "5:1:open": ("d6", "nothing_to_close"),
    }
    ids = {row["subject_id"]: row["id"] for row in watches}
    assert [row["result"].get("watch_id") for row in completions if row["key"][0] in "124"] == [
        ids["d1"],
        ids["d2"],
        ids["d3"],
        ids["d1"],
        None,
        ids["d4"],
        None,
        ids["d3"],
    ]
    assert [(w["subject_id"], w["closed_reason"], w["source_event_id"]) for w in watches] == [
        ("d1", "won", 1),
        ("d2", None, 1),
        ("d3", "subject_gone", 1),
        ("d4", None, 2),
    ]
