"""evaluate: reconciliation, due steps through the ledger, catch-up, closing, errors."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg
import psycopg
import pytest

from followup_pipeline.store.db import connection_kwargs
from followup_pipeline_tests.support import free_port

from .conftest import MONDAY, Machine


def test_evaluate_registers_deal_whose_webhook_was_dropped(machine: Machine) -> None:
    deal = machine.deal(name="Dropped webhook", accountName="Acme")
    result = machine.evaluate(MONDAY)
    assert result.success
    watch = machine.watch(deal)
    assert (watch["registered_by"], watch["subject_name"], watch["base_on"]) == (
        "reconcile",
        "Dropped webhook",
        date(2026, 3, 2),
    )
    assert [s["due_on"] for s in machine.steps(deal)] == [
        date(2026, 3, 9),
        date(2026, 3, 18),
        date(2026, 3, 31),
    ]
    assert result.output_for_node("evaluate_due")["registered"] == 1
    run = machine.instance.get_run_by_id(result.run_id)
    assert run is not None
    assert run.tags["followup/clock"] == f"set to {MONDAY.isoformat()}"  # not a run like others


def test_evaluate_fires_a_due_step_exactly_once(machine: Machine) -> None:
    deal = machine.deal(name="Offer", accountName="Acme GmbH")
    machine.evaluate(MONDAY)
    assert machine.tasks() == []
    # The step is due on the next Monday at the working day's start (07:00), not at midnight.
    assert machine.evaluate(MONDAY + timedelta(days=7, hours=-8)).success  # 01:00 in Berlin
    assert machine.tasks() == []
    first = machine.evaluate(MONDAY + timedelta(days=7))
    machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    tasks = machine.tasks()
    assert len(tasks) == 1
    assert "Offer" in tasks[0]["name"]
    assert "Schritt 1 von 3" in tasks[0]["name"]  # in the team's language: German by default
    assert "Acme GmbH" in tasks[0]["name"]
    step = machine.steps(deal)[0]
    assert step["task_ref"] == tasks[0]["id"]
    [action] = machine.actions()
    assert (action["idempotency_key"], action["outcome"]) == (
        f"task:{machine.watch(deal)['id']}:1",
        "confirmed",
    )
    assert first.output_for_node("evaluate_due")["fired"] == 1
    assert machine.outcome(first) == "ok"


def test_evaluate_after_three_week_outage_fires_latest_step_only(machine: Machine) -> None:
    deals = [machine.deal(name=f"Deal {n}") for n in range(3)]
    machine.evaluate(MONDAY)
    machine.evaluate(MONDAY + timedelta(weeks=3))
    tasks = machine.tasks()
    assert len(tasks) == 3
    assert all("Schritt 2 von 3" in t["name"] for t in tasks)
    for deal in deals:
        first, second, third = machine.steps(deal)
        assert first["skip_reason"] == "superseded"
        assert first["fired_at"] is None
        assert second["fired_at"] is not None
        assert second["task_ref"]
        assert third["fired_at"] is None
        assert third["skipped_at"] is None
    outcomes = sorted((a["step_no"], a["outcome"], a["reason"]) for a in machine.actions())
    assert outcomes == [(1, "suppressed", "superseded")] * 3 + [(2, "confirmed", None)] * 3


def test_evaluate_closes_won_and_deleted_deals_and_suppresses_their_steps(
    machine: Machine,
) -> None:
    won, gone, other = machine.deal(), machine.deal(), machine.deal(name="Kept")
    machine.evaluate(MONDAY)
    machine.move(won, "Closed Won")
    machine.delete(gone)
    machine.evaluate(MONDAY + timedelta(days=8))
    assert machine.watch(won)["closed_reason"] == "won"
    assert machine.watch(gone)["closed_reason"] == "subject_gone"
    for deal in (won, gone):
        assert {s["skip_reason"] for s in machine.steps(deal)} == {"deal_closed"}
    assert machine.watch(other)["closed_at"] is None
    assert len(machine.tasks()) == 1
    suppressed = [a for a in machine.actions() if a["outcome"] == "suppressed"]
    assert {a["reason"] for a in suppressed} == {"deal_closed"}


def test_evaluate_crm_error_on_one_deal_is_partial(machine: Machine) -> None:
    broken, *fine = [machine.deal(name=f"Deal {n}") for n in range(3)]
    machine.evaluate(MONDAY)
    machine.fault(vendor="espocrm", kind="error", status=500, deal_id=broken)
    result = machine.evaluate(MONDAY + timedelta(days=7))
    assert result.success
    assert machine.outcome(result) == "partial"
    assert machine.steps(broken)[0]["fired_at"] is None
    assert all(machine.steps(deal)[0]["fired_at"] is not None for deal in fine)
    assert len(machine.tasks()) == 2


def test_evaluate_lost_answer_from_clickup_creates_no_duplicate(machine: Machine) -> None:
    deal = machine.deal(name="Crash")
    machine.evaluate(MONDAY)
    machine.fault(vendor="clickup", kind="drop_answer", method="POST", count=1)
    crashed = machine.evaluate(MONDAY + timedelta(days=7))
    assert machine.outcome(crashed) == "partial"
    assert len(machine.tasks()) == 1  # ClickUp created it; we never heard back
    assert machine.steps(deal)[0]["fired_at"] is None
    assert [a["outcome"] for a in machine.actions()] == ["unknown"]
    machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    tasks = machine.tasks()
    assert len(tasks) == 1
    assert machine.steps(deal)[0]["task_ref"] == tasks[0]["id"]
    [action] = machine.actions()
    # Resolved by asking ClickUp, not by a second attempt at creating it.
    assert (action["outcome"], action["provider_ref"], action["attempts"]) == (
        "confirmed",
        tasks[0]["id"],
        1,
    )


def test_evaluate_misspelt_stage_fails_naming_it(machine: Machine) -> None:
    machine.settings["watched_stages"] = ["Proposal", "Negociation"]
    result = machine.evaluate(MONDAY, raise_on_error=False)
    assert not result.success
    failure = result.failure_data_for_node("sync")
    assert failure is not None
    message = str(failure.user_failure_data.description if failure.user_failure_data else failure)
    assert "'Negociation'" in message
    assert "'Negotiation'" in message
    assert "'Closed Won'" in message


def test_evaluate_closing_a_lost_deal_closes_its_task_with_a_comment(machine: Machine) -> None:
    deal = machine.deal(name="Lost one")
    machine.evaluate(MONDAY)
    machine.evaluate(MONDAY + timedelta(days=7))
    [task] = machine.tasks()
    machine.move(deal, "Closed Lost")
    machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    machine.evaluate(MONDAY + timedelta(days=7, hours=2))
    assert machine.watch(deal)["closed_reason"] == "lost"
    [task] = machine.tasks()
    assert task["status"]["type"] == "closed" or task["status"]["status"] == "closed"
    comments = machine.comments()
    texts = [
        c["comment_text"]
        for c in (comments.get(task["id"], []) if isinstance(comments, dict) else comments)
    ]
    assert texts == ["Von Followup geschlossen: Der Deal wurde verloren."]
    closes = [a for a in machine.actions() if a["kind"] == "close_task"]
    assert [(a["outcome"], a["provider_ref"]) for a in closes] == [("confirmed", task["id"])]


def test_evaluate_dry_run_writes_postgres_only(machine: Machine) -> None:
    deal = machine.deal()
    machine.settings["dry_run"] = True
    machine.evaluate(MONDAY)
    machine.evaluate(MONDAY + timedelta(days=7))
    assert machine.tasks() == []
    assert machine.steps(deal)[0]["task_ref"] == "dry-run"
    [action] = machine.actions()
    assert (action["outcome"], action["reason"]) == ("suppressed", "dry_run")


def test_evaluate_outside_the_queue_second_run_ends_quietly(machine: Machine) -> None:
    import threading

    machine.deal()
    machine.evaluate(MONDAY)
    # Slow the CRM so the first run still holds the lock when the second starts.
    machine.fault(vendor="espocrm", kind="latency", latency_s=1.5, path="Metadata")
    results: list[dg.ExecuteInProcessResult] = []
    first = threading.Thread(
        target=lambda: results.append(machine.evaluate(MONDAY + timedelta(days=7)))
    )
    first.start()
    import time

    time.sleep(0.7)
    second = machine.evaluate(MONDAY + timedelta(days=7))
    first.join(timeout=60)
    assert machine.outcome(second) == "skipped"
    assert second.output_for_node("evaluate_due")["skipped"] == 1
    reason = second.output_for_node("evaluate_due")["reason"]
    assert f"followup-lock {results[0].run_id}" in reason  # who holds the lock, by run id
    assert machine.outcome(results[0]) == "ok"
    assert len(machine.tasks()) == 1


@pytest.mark.parametrize("activity", ["emails", "calls", "meetings"])
def test_evaluate_activity_resets_the_cadence(machine: Machine, activity: str) -> None:
    deal = machine.deal()
    machine.evaluate(MONDAY)
    when = "2026-03-05 10:00:00"  # Thursday, after registration
    item = {"dateSent": when} if activity == "emails" else {"dateStart": when, "status": "Held"}
    with machine.control() as control:
        control.post(f"/deals/{deal}/{activity}", json=item).raise_for_status()
    machine.evaluate(MONDAY + timedelta(days=4))
    assert [s["due_on"] for s in machine.steps(deal)] == [
        date(2026, 3, 12),
        date(2026, 3, 23),
        date(2026, 4, 7),  # over Good Friday and Easter Monday
    ]
    assert machine.watch(deal)["last_reset_at"] is not None


def test_evaluate_exhausted_watch_closes_and_is_not_reopened(machine: Machine) -> None:
    deal = machine.deal()
    machine.evaluate(MONDAY)
    machine.evaluate(MONDAY + timedelta(weeks=6))  # step 3 due (1 and 2 superseded)
    assert machine.watch(deal)["closed_at"] is None
    machine.evaluate(MONDAY + timedelta(weeks=7, days=1))
    watch = machine.watch(deal)
    assert watch["closed_reason"] == "exhausted"
    machine.evaluate(MONDAY + timedelta(weeks=7, days=1, hours=1))
    assert machine.watch(deal)["id"] == watch["id"]
    # Moved on to another watched stage (no webhook): a new watch, as a webhook would open.
    machine.sandbox_clock(MONDAY + timedelta(weeks=7, days=1, hours=1))
    machine.move(deal, "Negotiation")
    machine.evaluate(MONDAY + timedelta(weeks=7, days=1, hours=2))
    reopened = machine.watch(deal)
    assert reopened["id"] != watch["id"]
    assert (reopened["stage"], reopened["closed_at"]) == ("Negotiation", None)


def test_evaluate_postgres_gone_mid_run_fails_and_marks_nothing_without_task(
    machine: Machine, pg_admin_url: str
) -> None:
    import threading
    import time

    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

    deals = [machine.deal(name=f"Deal {n}") for n in range(3)]
    machine.evaluate(MONDAY)
    name = str(conninfo_to_dict(machine.db_url)["dbname"])
    machine.fault(vendor="clickup", kind="latency", latency_s=1.0, method="POST")

    def pull_the_plug() -> None:
        # Inside the first ClickUp create (1 s of latency): its ledger row is attempted first.
        with psycopg.connect(machine.db_url, autocommit=True, **connection_kwargs()) as watch:
            deadline = time.monotonic() + 30
            while (
                time.monotonic() < deadline
                and not watch.execute(
                    "SELECT 1 FROM actions WHERE outcome = 'attempted'"
                ).fetchone()
            ):
                time.sleep(0.02)
        time.sleep(0.3)
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name))
            )
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )

    machine.db.close()
    plug = threading.Thread(target=pull_the_plug)
    plug.start()
    result = machine.evaluate(MONDAY + timedelta(days=7), raise_on_error=False)
    plug.join()
    assert not result.success
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name))
        )
    machine.db = psycopg.connect(machine.db_url, autocommit=True, **connection_kwargs())
    try:
        created = {t["id"] for t in machine.tasks()}
        fired = [s for deal in deals for s in machine.steps(deal) if s["fired_at"] is not None]
        assert all(s["task_ref"] in created for s in fired)
        assert len(fired) < len(deals)

        machine.evaluate(MONDAY + timedelta(days=7, hours=1))
        tasks = machine.tasks()
        assert len(tasks) == len(deals)
        refs = sorted(machine.steps(deal)[0]["task_ref"] for deal in deals)
        assert refs == sorted(t["id"] for t in tasks)
        assert {a["outcome"] for a in machine.actions()} == {"confirmed"}
    finally:
        machine.db.close()


def test_evaluate_task_names_deal_links_crm_carries_summary_and_assignee(
    machine: Machine,
) -> None:
    mapped = machine.deal(name="Mapped", accountName="Acme", assignedUserId="crm-ada")
    unmapped = machine.deal(name="Unmapped", assignedUserId="crm-bob")
    machine.settings.update(clickup_user_map={"crm-ada": 42}, clickup_default_assignee=7)
    machine.evaluate(MONDAY)
    machine.db.execute(
        "INSERT INTO enrichments (subject_id, input_hash, line1, line2, model)"
        " VALUES (%s, 'h1', 'Kunde wartet auf das Angebot.', 'Rückruf am Freitag.', 'm')",
        (mapped,),
    )
    machine.evaluate(MONDAY + timedelta(days=7))
    tasks = {
        t["name"].split(":")[1].split(" (")[0].split(" —")[0].strip(): t for t in machine.tasks()
    }
    first = tasks["Mapped"]
    assert [a["id"] for a in first["assignees"]] == [42]
    assert [a["id"] for a in tasks["Unmapped"]["assignees"]] == [7]
    assert "Kunde wartet auf das Angebot." in first["description"]
    assert "Rückruf am Freitag." in first["description"]
    assert f"#Opportunity/view/{mapped}" in first["description"]
    assert "**Warum jetzt:** Schritt 1 von 3, heute fällig." in first["description"]
    assert "Acme" in first["name"]
    # Due at the start of the business day, local time: 07:00 in Berlin is 06:00 UTC.
    assert int(first["due_date"]) == int(datetime(2026, 3, 9, 6, 0, tzinfo=UTC).timestamp() * 1000)
    assert unmapped in {
        s["subject_id"] for s in machine.db.execute("SELECT subject_id FROM watches")
    }


def test_evaluate_a_truncated_create_answer_fails_one_task_not_the_run(machine: Machine) -> None:
    deals = [machine.deal(name=f"Deal {n}") for n in range(3)]
    machine.evaluate(MONDAY)
    machine.fault(vendor="clickup", kind="malformed", method="POST", path="/task$", count=1)
    result = machine.evaluate(MONDAY + timedelta(days=7))
    assert result.success
    assert machine.outcome(result) == "partial"
    outcomes = sorted(a["outcome"] for a in machine.actions())
    assert outcomes == ["confirmed", "confirmed", "unknown"]  # the truncated one is ambiguous
    machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    assert len(machine.tasks()) == 3  # settled by search: the created task was found, not doubled
    assert all(machine.steps(deal)[0]["task_ref"] for deal in deals)


def test_evaluate_a_create_that_took_effect_then_answered_500_leaves_one_task(
    machine: Machine,
) -> None:
    deal = machine.deal(name="Half done")
    machine.evaluate(MONDAY)
    machine.fault(vendor="clickup", kind="apply_then_error", method="POST", path="/task$", count=1)
    first = machine.evaluate(MONDAY + timedelta(days=7))
    assert machine.outcome(first) == "partial"
    assert len(machine.tasks()) == 1  # ClickUp did it, then said 500
    assert [a["outcome"] for a in machine.actions()] == ["unknown"]  # ambiguous, not failed
    machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    [task] = machine.tasks()
    assert machine.steps(deal)[0]["task_ref"] == task["id"]
    [action] = machine.actions()
    assert (action["outcome"], action["attempts"]) == ("confirmed", 1)  # settled, not re-sent


def test_evaluate_webhooks_lost_while_the_ingress_is_down_are_made_good(
    machine: Machine,
) -> None:
    won, left = machine.deal(name="Won"), machine.deal(name="Left")
    entering = machine.deal(name="Entering", stage="Prospecting")
    machine.evaluate(MONDAY)
    with machine.control() as control:
        # The ingress is down: nothing listens where EspoCRM sends its webhooks.
        control.post("/webhooks", json={"url": f"http://127.0.0.1:{free_port()}/webhooks/espocrm"})
        machine.move(won, "Closed Won")
        machine.move(left, "Prospecting")
        machine.move(entering, "Proposal")
        deliveries = control.post("/webhooks/flush", json={"only_due": True}).json()["deliveries"]
        queue = control.get("/webhooks").json()["queue"]
    assert deliveries
    assert {(d["status"], d["outcome"]) for d in deliveries} == {(0, "failed")}
    assert queue == []  # EspoCRM does not retry a refused connection: they are lost for good
    assert machine.db.execute("SELECT count(*) AS n FROM events").fetchone() == {"n": 0}
    machine.evaluate(MONDAY + timedelta(hours=1))
    assert machine.watch(won)["closed_reason"] == "won"
    assert machine.watch(left)["closed_reason"] == "out_of_scope"
    assert machine.watch(entering)["closed_at"] is None


def test_evaluate_an_ambiguous_500_again_and_again_ends_as_a_dead_letter(
    machine: Machine,
) -> None:
    machine.settings["action_max_attempts"] = 2
    machine.deal(name="Never created")
    machine.evaluate(MONDAY)
    machine.fault(vendor="clickup", kind="error", status=500, method="POST", path="/task$")
    for hour in range(3):
        machine.evaluate(MONDAY + timedelta(days=7, hours=hour))
    [action] = machine.actions()
    # Each search found nothing, so each ambiguous attempt counted as failed; then it waits.
    assert (action["outcome"], action["attempts"]) == ("failed", 2)
    assert machine.tasks() == []


def test_evaluate_closing_a_task_moved_out_of_sight_counts_as_closed(machine: Machine) -> None:
    deal = machine.deal(name="Moved away")
    machine.evaluate(MONDAY)
    machine.evaluate(MONDAY + timedelta(days=7))
    [task] = machine.tasks()
    with machine.control() as control:
        control.post(f"/clickup/tasks/{task['id']}/move", json={"list_id": "elsewhere"})
    machine.move(deal, "Closed Won")
    result = machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    assert machine.outcome(result) == "ok"  # ClickUp's 401 OAUTH_027: gone for us, not a failure
    closes = [a for a in machine.actions() if a["kind"] == "close_task"]
    assert [(a["outcome"], a["last_error"]) for a in closes] == [
        ("confirmed", "the task no longer exists in ClickUp")
    ]
