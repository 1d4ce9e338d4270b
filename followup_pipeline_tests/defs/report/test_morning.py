"""The morning list end to end: real Postgres, the sandbox's Graph, once per partition."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.defs import report

from ..evaluate.conftest import MONDAY, Machine

NEXT_MONDAY = MONDAY + timedelta(days=7)  # step 1 (business day 5) is due on 2026-03-09


def _morning(machine: Machine, day: str, *, force: bool = False) -> Any:
    job = machine.job(report, "morning_report", machine.resources(NEXT_MONDAY))
    config = {"ops": {"send_morning_list": {"config": {"force": force}}}}
    return job.execute_in_process(instance=machine.instance, partition_key=day, run_config=config)


def test_morning_list_goes_out_once_per_day_and_again_only_when_forced(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    deal = machine.deal(name="<script>alert(1)</script> GmbH")
    machine.evaluate(MONDAY)
    machine.evaluate(NEXT_MONDAY)  # fires step 1: the task of today

    assert _morning(machine, "2026-03-09").success
    [mail] = machine.outbox()
    message = mail["message"]
    assert message["subject"] == "Follow-ups for 2026-03-09"
    assert message["toRecipients"] == [{"emailAddress": {"address": "team@example.com"}}]
    html = message["body"]["content"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt; GmbH" in html  # names from the CRM are text
    assert "<script>" not in html
    assert "step 1 of 3" in html
    # multipart/alternative: the plain-text part beside the HTML
    assert "Due today: <script>alert(1)</script> GmbH, step 1 of 3" in message["textBody"]
    assert machine.watch(deal)["crm_url"] in html

    # A rerun (a retry, a second backfill) sends nothing.
    assert _morning(machine, "2026-03-09").success
    assert len(machine.outbox()) == 1
    # force: true sends again, under a key of its own.
    assert _morning(machine, "2026-03-09", force=True).success
    assert len(machine.outbox()) == 2
    keys = [
        r["idempotency_key"]
        for r in db.execute("SELECT idempotency_key FROM actions WHERE kind = 'report' ORDER BY id")
    ]
    assert keys == ["report:morning:2026-03-09", "report:morning:2026-03-09#1"]


def test_morning_list_of_a_missed_day_says_it_is_late(machine: Machine) -> None:
    machine.deal(name="Late GmbH")
    machine.evaluate(MONDAY)
    assert _morning(machine, "2026-03-06").success  # Friday's list, sent on Monday
    [mail] = machine.outbox()
    assert mail["message"]["subject"] == "late: Follow-ups for 2026-03-06"
    assert "This list was sent late." in mail["message"]["body"]["content"]
    assert _morning(machine, "2026-03-06").success
    assert len(machine.outbox()) == 1
    assert _morning(machine, "2026-03-06", force=True).success  # once more, when asked
    assert len(machine.outbox()) == 2


def test_morning_list_dry_run_and_no_recipients_send_nothing(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.settings["dry_run"] = True
    assert _morning(machine, "2026-03-09").success
    assert machine.outbox() == []
    row = db.execute("SELECT outcome, reason FROM actions WHERE kind = 'report'").fetchone()
    assert row == {"outcome": "suppressed", "reason": "dry_run"}
    machine.settings.update(dry_run=False, report_recipients="")
    result = _morning(machine, "2026-03-10")
    assert machine.outcome(result) == "skipped"
    assert machine.outbox() == []


def test_morning_list_a_failing_graph_fails_the_run_and_the_next_run_sends_once(
    machine: Machine,
) -> None:
    machine.fault(vendor="graph", kind="apply_then_error", method="POST", path="/send$", count=1)
    result = _morning_raw(machine, "2026-03-09")
    assert not result.success
    assert _morning(machine, "2026-03-09").success  # finds it in Sent Items
    assert len(machine.outbox()) == 1


def _morning_raw(machine: Machine, day: str) -> Any:
    job = machine.job(report, "morning_report", machine.resources(NEXT_MONDAY))
    return job.execute_in_process(
        instance=machine.instance, partition_key=day, raise_on_error=False
    )


def test_morning_preview_renders_without_sending(
    machine: Machine,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    machine.deal(name="Vorschau GmbH")
    machine.evaluate(MONDAY)
    machine.evaluate(NEXT_MONDAY)
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    monkeypatch.setenv("FOLLOWUP_NOW", NEXT_MONDAY.isoformat())
    html = tmp_path / "morning.html"
    argv = ["report", "preview", "morning", "--date", "2026-03-09", "--lang", "de"]
    assert main([*argv, "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "Subject: Follow-ups am 09.03.2026" in out
    assert "Heute fällig: Vorschau GmbH" in out
    assert "Vorschau GmbH" in html.read_text()
    assert main(["report", "preview", "weekly", "--date", "2026-03-13", "--lang", "en"]) == 0
    assert "Subject: Weekly overview 2026-03-07 – 2026-03-13" in capsys.readouterr().out
    assert machine.outbox() == []
    assert db.execute("SELECT count(*) AS n FROM actions WHERE kind = 'report'").fetchone() == {
        "n": 0
    }


def test_morning_list_a_send_that_may_still_be_on_its_way_fails_the_run(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    # A run died right after committing `attempted` (its request may be on its way).
    db.execute(
        "INSERT INTO actions (idempotency_key, kind, due_at, time_zone, outcome, attempts)"
        " VALUES ('report:morning:2026-03-09', 'report', now(), 'Europe/Berlin', 'attempted', 1)"
    )
    machine.settings["action_in_flight_s"] = 3600
    result = _morning_raw(machine, "2026-03-09")
    assert not result.success  # neither sent nor known unsent: the partition shows it
    assert machine.outbox() == []
    machine.settings["action_in_flight_s"] = 0  # the window passed: Sent Items has no such mail
    assert _morning(machine, "2026-03-09").success
    assert len(machine.outbox()) == 1


def test_morning_force_on_an_unsent_day_sends_it_once_and_a_retry_reuses_its_key(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.deal(name="Einmal GmbH")
    machine.evaluate(MONDAY)
    assert _morning(machine, "2026-03-09", force=True).success  # nothing sent yet: the base key
    assert _morning(machine, "2026-03-09").success
    assert len(machine.outbox()) == 1
    forced = _morning(machine, "2026-03-09", force=True)
    assert len(machine.outbox()) == 2
    # A retry of the forced run (same root run) sends nothing more.
    job = machine.job(report, "morning_report", machine.resources(NEXT_MONDAY))
    retry = job.execute_in_process(
        instance=machine.instance,
        partition_key="2026-03-09",
        run_config={"ops": {"send_morning_list": {"config": {"force": True}}}},
        tags={"dagster/root_run_id": forced.run_id},
    )
    assert retry.success
    assert len(machine.outbox()) == 2
    keys = [
        r["idempotency_key"]
        for r in db.execute("SELECT idempotency_key FROM actions WHERE kind = 'report' ORDER BY id")
    ]
    assert keys == ["report:morning:2026-03-09", "report:morning:2026-03-09#1"]


def test_morning_list_shows_a_paused_watchs_waiting_step(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deal = machine.deal(name="Pause GmbH")
    machine.evaluate(MONDAY)
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    monkeypatch.setenv("FOLLOWUP_NOW", (MONDAY + timedelta(days=6)).isoformat())
    assert main(["watches", "pause", str(machine.watch(deal)["id"])]) == 0
    machine.evaluate(NEXT_MONDAY)  # the due step is skipped `paused`
    monkeypatch.setenv("FOLLOWUP_NOW", (NEXT_MONDAY + timedelta(days=1)).isoformat())
    capsys.readouterr()
    assert main(["report", "preview", "morning", "--date", "2026-03-10", "--lang", "en"]) == 0
    assert "Overdue: Pause GmbH, step 1 of 3, 2026-03-09: paused" in capsys.readouterr().out
