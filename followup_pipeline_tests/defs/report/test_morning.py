"""The morning list end to end: real Postgres, the sandbox's Graph, once per partition."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.defs import report

from ..evaluate.conftest import MONDAY, Machine

NEXT_MONDAY = MONDAY + timedelta(days=7)  # step 1 (business day 5) is due on 2026-03-09


def _morning(
    machine: Machine, day: str, *, force: bool = False, now: datetime = NEXT_MONDAY
) -> Any:
    job = machine.job(report, "morning_report", machine.resources(now))
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
    assert "<th align" in html
    assert ">1 of 3<" in html
    # multipart/alternative: the plain-text part beside the HTML
    text = message["textBody"]
    assert "Due today (1)\n* <script>alert(1)</script> GmbH [1]\n" in text
    assert f"[1] {machine.watch(deal)['crm_url']}" in text
    assert machine.watch(deal)["crm_url"] in html
    task = machine.db.execute(
        "SELECT task_ref, task_url FROM watch_steps WHERE fired_at IS NOT NULL"
    ).fetchone()
    assert task is not None
    # The task's own url, as ClickUp (the sandbox) answered it: a link that opens.
    assert task["task_url"].endswith(f"/clickup/t/{task['task_ref']}")
    assert task["task_url"] in html
    # The mail's links open: the CRM's deal (its page lists it) and the task's own page.
    crm_url = machine.watch(deal)["crm_url"]
    for url in (crm_url, task["task_url"]):
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt; GmbH" in page.text, url

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
    machine.evaluate(NEXT_MONDAY)  # fires step 1, due on Monday the 9th
    tuesday = NEXT_MONDAY + timedelta(days=1)
    assert _morning(machine, "2026-03-09", now=tuesday).success  # Monday's list, on Tuesday
    [mail] = machine.outbox()
    assert mail["message"]["subject"] == "late: Follow-ups for 2026-03-09"
    assert "This list was sent late." in mail["message"]["body"]["content"]
    assert _morning(machine, "2026-03-09", now=tuesday).success
    assert len(machine.outbox()) == 1
    assert _morning(machine, "2026-03-09", now=tuesday, force=True).success  # once more
    assert len(machine.outbox()) == 2


def test_morning_list_with_nothing_due_is_not_sent_and_says_why(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.deal(name="Quiet GmbH")
    machine.evaluate(MONDAY)  # step 1 is due on the 9th: nothing on the 6th
    result = _morning(machine, "2026-03-06")
    assert result.success
    assert machine.outbox() == []
    row = db.execute("SELECT outcome, reason FROM actions WHERE kind = 'report'").fetchone()
    assert row == {"outcome": "suppressed", "reason": "nothing_due"}
    counts = result.output_for_node("send_morning_list")
    assert counts["skipped_nothing_due"] == 1
    # Later that day something is due after all (a backfill after a late evaluate): it goes.
    machine.db.execute("UPDATE watch_steps SET due_on = '2026-03-06' WHERE step_no = 1")
    assert _morning(machine, "2026-03-06").success
    assert len(machine.outbox()) == 1


def test_morning_list_sent_late_shows_the_tasks_created_after_its_day(machine: Machine) -> None:
    machine.deal(name="Caught-up GmbH")
    machine.evaluate(MONDAY)
    tuesday = NEXT_MONDAY + timedelta(days=1)
    machine.evaluate(tuesday)  # step 1, due Monday the 9th, gets its task on Tuesday
    assert _morning(machine, "2026-03-09", now=tuesday + timedelta(hours=1)).success
    [mail] = machine.outbox()
    assert "Caught-up GmbH" in mail["message"]["textBody"]  # on no list otherwise


def test_morning_list_nothing_due_leaves_a_send_that_may_have_gone(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    # A send whose answer was lost (Graph timed out after taking it), then nothing is due.
    db.execute(
        "INSERT INTO actions (idempotency_key, kind, due_at, time_zone, outcome, attempts)"
        " VALUES ('report:morning:2026-03-06', 'report', now(), 'Europe/Berlin', 'unknown', 1)"
    )
    assert _morning(machine, "2026-03-06").success
    row = db.execute("SELECT outcome, reason FROM actions WHERE kind = 'report'").fetchone()
    assert row == {"outcome": "unknown", "reason": None}  # not overwritten as never sent


def test_morning_list_each_salesperson_gets_their_own(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.settings["salesperson_addresses"] = (
        '{"u-ada": "ada@example.com", "u-grace": "grace@example.com", "u-idle": "i@example.com"}'
    )
    # A German team, Ada reading English: her own list comes in English, the team's in German.
    machine.settings["report_language"] = "de"
    machine.settings["salesperson_languages"] = '{"u-ada": "en"}'

    machine.deal(name="Ada's GmbH", assignedUserId="u-ada", assignedUserName="Ada Lovelace",
                 amount=15000, amountCurrency="EUR")  # fmt: skip
    machine.deal(name="Grace AG", assignedUserId="u-grace", assignedUserName="Grace Hopper")
    machine.evaluate(MONDAY)
    machine.evaluate(NEXT_MONDAY)
    assert _morning(machine, "2026-03-09").success
    mails = {
        m["message"]["toRecipients"][0]["emailAddress"]["address"]: m["message"]
        for m in machine.outbox()
    }
    assert set(mails) == {"team@example.com", "ada@example.com", "grace@example.com"}
    assert mails["ada@example.com"]["subject"] == "Your follow-ups for 2026-03-09"
    ada = mails["ada@example.com"]["textBody"]
    assert "Good morning, Ada Lovelace." in ada
    assert "Ada's GmbH" in ada
    assert "Grace AG" not in ada
    assert "15,000 EUR" in ada
    team = mails["team@example.com"]["textBody"]
    assert "Ada's GmbH" in team
    assert "Grace AG" in team
    assert mails["team@example.com"]["subject"] == "Follow-ups am 09.03.2026"
    assert mails["grace@example.com"]["subject"] == "Ihre Follow-ups am 09.03.2026"
    keys = {
        r["idempotency_key"]: (r["outcome"], r["reason"])
        for r in db.execute("SELECT idempotency_key, outcome, reason FROM actions")
        if r["idempotency_key"].startswith("report:")
    }
    assert keys == {
        "report:morning:2026-03-09": ("accepted", None),
        "report:morning:2026-03-09:to:u-ada": ("accepted", None),
        "report:morning:2026-03-09:to:u-grace": ("accepted", None),
        "report:morning:2026-03-09:to:u-idle": ("suppressed", "nothing_due"),
    }
    # A rerun sends none of them again.
    assert _morning(machine, "2026-03-09").success
    assert len(machine.outbox()) == 3


def test_morning_list_dry_run_and_no_recipients_send_nothing(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.deal(name="Dry GmbH")
    machine.evaluate(MONDAY)  # its step 1 is due on the 9th
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
    machine.deal(name="Graph GmbH")
    machine.evaluate(MONDAY)
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
    assert "Subject: Vorschau: Follow-ups am 09.03.2026" in out
    assert "Heute fällig (1)\n* Vorschau GmbH [1]" in out
    assert "Vorschau: Diese Liste wurde nicht versandt." in out
    assert "Vorschau GmbH" in html.read_text()
    assert main(["report", "preview", "weekly", "--date", "2026-03-13", "--lang", "en"]) == 0
    assert "Subject: Preview: Weekly overview 2026-03-07 – 2026-03-13" in capsys.readouterr().out
    assert machine.outbox() == []
    assert db.execute("SELECT count(*) AS n FROM actions WHERE kind = 'report'").fetchone() == {
        "n": 0
    }


def test_morning_list_a_send_that_may_still_be_on_its_way_fails_the_run(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.deal(name="Flight GmbH")
    machine.evaluate(MONDAY)
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
    out = capsys.readouterr().out
    assert "Overdue (1)\n* Pause GmbH [1]" in out
    assert "Step 1 of 3, due since 9 March: paused" in out


def test_morning_list_says_the_crm_is_unreachable_since_the_run_that_found_it_so(
    machine: Machine,
) -> None:
    """EspoCRM answers 503 to the 07:00 evaluate: the run ends partial, the list does not say
    "all is running" with the last clean run's time; it says since when the CRM is away, when it
    was last read in full, and what waits."""
    machine.deal(name="Atlas Maschinenbau")
    machine.evaluate(MONDAY)
    machine.evaluate(NEXT_MONDAY - timedelta(hours=1))  # step 1 of Monday fires
    machine.fault(vendor="espocrm", kind="error", status=503)
    down = NEXT_MONDAY.replace(hour=6)  # 07:00 in Berlin
    assert machine.evaluate(down).success  # green, but partial
    assert _morning(machine, "2026-03-09", now=down + timedelta(minutes=30)).success
    [mail] = machine.outbox()
    text = mail["message"]["textBody"]
    assert "The CRM has been unreachable since 2026-03-09 07:00 CET" in text
    assert "All is running" not in text


def test_morning_list_counts_a_catch_up_task_overdue_in_its_header_and_row(
    machine: Machine,
) -> None:
    """Step 1 was due on Monday; the machine first ran on Tuesday and made its task then: the
    list of Tuesday counts it overdue, says since when, and links its task."""
    machine.deal(name="Spät GmbH")
    machine.evaluate(MONDAY)
    tuesday = NEXT_MONDAY + timedelta(days=1)
    machine.evaluate(tuesday)  # the catch-up task of Monday's step
    assert _morning(machine, "2026-03-10", now=tuesday + timedelta(hours=1)).success
    [mail] = machine.outbox()
    text = mail["message"]["textBody"]
    assert "0 due today, 1 overdue." in text
    overdue = text.partition("Overdue (1)")[2]
    assert "Spät GmbH" in overdue
    assert "due since 9 March" in overdue
    assert "/clickup/t/" in text
