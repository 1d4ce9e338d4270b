"""Operator control: pause and resume (CLI and Launchpad job), and `watches explain`."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from followup_pipeline.cli import main
from followup_pipeline.defs import watch_control
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_date

from .conftest import MONDAY, SANDBOX, Machine

ZONE = "Europe/Berlin"


def _control(machine: Machine, watch_id: int, action: str, now_offset: timedelta) -> None:
    resources = machine.resources(MONDAY + now_offset)
    job = machine.job(watch_control, "watch_control", resources)
    result = job.execute_in_process(
        run_config={"ops": {"control_watch": {"config": {"watch_id": watch_id, "action": action}}}},
        instance=machine.instance,
    )
    assert result.success


def test_control_pause_skips_due_steps_and_resume_replans_them(machine: Machine) -> None:
    deal = machine.deal()
    machine.evaluate(MONDAY)
    watch_id = machine.watch(deal)["id"]
    _control(machine, watch_id, "pause", timedelta(days=1))
    machine.evaluate(MONDAY + timedelta(days=7))
    assert machine.steps(deal)[0]["skip_reason"] == "paused"
    assert [(a["outcome"], a["reason"]) for a in machine.actions()] == [("suppressed", "paused")]
    assert machine.tasks() == []

    _control(machine, watch_id, "resume", timedelta(days=7, hours=1))
    resumed_on = local_date(MONDAY + timedelta(days=7), ZONE)
    calendar = BusinessCalendar("DE")
    expected = [calendar.add_business_days(resumed_on, offset) for offset in (5, 12, 21)]
    steps = machine.steps(deal)
    assert [s["due_on"] for s in steps] == expected
    assert all(s["skipped_at"] is None for s in steps)

    machine.evaluate(MONDAY + timedelta(days=14))
    [action] = machine.actions()
    assert (action["outcome"], action["reason"]) == ("confirmed", None)
    assert len(machine.tasks()) == 1
    # From the Launchpad too, each in the audit (the UI has no login: "the Dagster UI").
    audited = machine.db.execute("SELECT actor, action, subject FROM audit_log ORDER BY id")
    assert [tuple(row.values()) for row in audited] == [
        ("the Dagster UI", "watch.pause", f"deal:{deal}"),
        ("the Dagster UI", "watch.resume", f"deal:{deal}"),
    ]


def test_control_cli_refuses_to_resume_an_open_watch(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deal = machine.deal()
    machine.evaluate(MONDAY)
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    watch_id = str(machine.watch(deal)["id"])
    assert main(["watches", "resume", watch_id]) == 1
    assert "is not paused" in capsys.readouterr().out
    assert main(["watches", "pause", watch_id]) == 0
    assert machine.watch(deal)["paused_at"] is not None
    assert main(["watches", "list"]) == 0
    assert "paused" in capsys.readouterr().out


def test_control_explain_five_deals_in_five_states(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    never = machine.deal(name="Early", stage="Qualification")
    won = machine.deal(name="Won")
    paused = machine.deal(name="Paused")
    fired = machine.deal(name="Fired")
    later = machine.deal(name="Later")
    waiting = machine.deal(name="Waiting")
    machine.evaluate(MONDAY)
    # "Later" arrives a week after the others, so its first step is not due yet.
    machine.delete(later)
    machine.evaluate(MONDAY + timedelta(hours=1))
    later = machine.deal(name="Later")
    machine.evaluate(MONDAY + timedelta(days=3))
    machine.move(won, "Closed Won")
    _control(machine, machine.watch(paused)["id"], "pause", timedelta(days=3, hours=1))
    machine.fault(vendor="espocrm", kind="error", status=503, deal_id=waiting)
    today = timedelta(days=7, hours=1)
    machine.evaluate(MONDAY + today)

    unseen = machine.deal(name="Unseen")  # after the last evaluate

    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    monkeypatch.setenv("FOLLOWUP_NOW", (MONDAY + today + timedelta(minutes=5)).isoformat())
    monkeypatch.setenv("FOLLOWUP_ESPOCRM_URL", f"{machine.sandbox}/espocrm")
    monkeypatch.setenv("FOLLOWUP_ESPOCRM_API_KEY", SANDBOX.espocrm_api_key.get_secret_value())
    for name in ("CLICKUP_TOKEN", "GRAPH_CLIENT_SECRET", "MISTRAL_API_KEY"):
        monkeypatch.setenv(f"FOLLOWUP_{name}", "unused")
    now = (MONDAY + today + timedelta(minutes=5)).astimezone(ZoneInfo("Europe/Berlin"))
    expected = {
        never: "never seen it in a watched stage (Proposal, Negotiation); it is in stage "
        "'Qualification' now",
        unseen: f"not seen yet: the next evaluate at {now:%a %Y-%m-%d} {now.hour + 1:02d}:00 "
        "will open it",
        "0123456789abcdef0": "deal 0123456789abcdef0: no such deal in the CRM",
        won: "because the deal was won",
        paused: "paused since 2026-03-05",
        fired: "step 1 fired today",
        later: "step 1 is not due until 2026-03-12",
        waiting: "waiting on a CRM error",
    }
    for deal, words in expected.items():
        assert main(["watches", "explain", deal]) == 0
        out = capsys.readouterr().out
        assert words in out, out
    # An id that is no CRM id is refused before any request (it could name another endpoint).
    assert main(["watches", "explain", "../../x%2F"]) == 2
    assert "is no CRM id" in capsys.readouterr().out


def test_control_failed_action_becomes_a_dead_letter_and_replays_once(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deal = machine.deal(name="Poison task")
    machine.settings["action_max_attempts"] = 2
    machine.evaluate(MONDAY)
    machine.fault(vendor="clickup", kind="error", status=400, method="POST")
    for hour in range(3):
        machine.evaluate(MONDAY + timedelta(days=7, hours=hour))
    [action] = machine.actions()
    assert (action["outcome"], action["attempts"]) == ("failed", 2)  # the third run left it alone
    key = action["idempotency_key"]

    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    monkeypatch.setenv("FOLLOWUP_ACTION_MAX_ATTEMPTS", "2")
    assert main(["dead-letters", "list"]) == 0
    assert f"action:{key}" in capsys.readouterr().out
    with machine.control() as control:
        control.delete("/faults").raise_for_status()  # the cause is fixed
    assert main(["dead-letters", "replay", f"action:{key}"]) == 0
    assert f"action:{key}: replayed" in capsys.readouterr().out
    machine.evaluate(MONDAY + timedelta(days=7, hours=4))
    machine.evaluate(MONDAY + timedelta(days=7, hours=5))
    [task] = machine.tasks()
    assert machine.steps(deal)[0]["task_ref"] == task["id"]
    [action] = machine.actions()
    assert (action["outcome"], action["attempts"]) == ("confirmed", 3)
    assert main(["dead-letters", "replay", f"action:{key}"]) == 1  # no longer a dead letter
