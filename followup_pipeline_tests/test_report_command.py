"""``followup report send``: a report's window from a shell, into the sandbox's outbox, once."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.clock import build_clock
from followup_pipeline.defs.report.window import current_window
from followup_pipeline.sandbox.environment import DEMO_RECIPIENTS


def _outbox(sandbox: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{sandbox}/_sandbox/outbox", timeout=10)
    return list(answer.json()["messages"])


def _seed_a_step_due_on(db: psycopg.Connection[Any], day: date) -> None:
    """A watched deal whose first step is due on ``day`` (as evaluate would have planned it)."""
    watch = db.execute(
        "INSERT INTO watches (subject_id, subject_name, stage, cadence_name, offsets, time_zone,"
        " base_on, registered_at, registered_by)"
        " VALUES ('d1', 'Seed GmbH', 'Proposal', 'default', '{5,12,21}', 'Europe/Berlin',"
        " %s, now(), 'reconcile') RETURNING id",
        (day - timedelta(days=7),),
    ).fetchone()
    assert watch is not None
    db.execute(
        "INSERT INTO watch_steps (watch_id, step_no, offset_days, due_on) VALUES (%s, 1, 5, %s)",
        (watch["id"], day),
    )


def test_report_send_sends_the_current_window_once_and_again_when_forced(
    on_sandbox: str, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    window = current_window("morning", build_clock(None).now(), "Europe/Berlin")
    assert main(["report", "send", "morning"]) == 0  # nothing is due: nothing is sent
    assert "not sent: nothing is due or overdue" in capsys.readouterr().out
    assert _outbox(on_sandbox) == []
    _seed_a_step_due_on(db, date.fromisoformat(window))
    assert main(["report", "send", "morning"]) == 0
    out = capsys.readouterr().out
    assert f"morning_report {window}: 1 sent as report:morning:{window}" in out
    [mail] = _outbox(on_sandbox)
    message = mail["message"]
    assert f"Follow-ups for {window}" in message["subject"]
    assert [r["emailAddress"]["address"] for r in message["toRecipients"]] == list(DEMO_RECIPIENTS)

    # Once per window: a second send sends nothing, --force sends again under a key of its own.
    assert main(["report", "send", "morning"]) == 0
    assert "already_sent" in capsys.readouterr().out
    assert len(_outbox(on_sandbox)) == 1
    assert main(["report", "send", "morning", "--force"]) == 0
    assert f"1 sent as report:morning:{window}#1" in capsys.readouterr().out
    assert len(_outbox(on_sandbox)) == 2


def test_report_send_of_a_given_day_and_of_nobody(
    on_sandbox: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A Thursday's overview is the week that ended on the Friday before it.
    first = current_window("weekly", build_clock(None).now(), "Europe/Berlin")
    thursday = date.fromisoformat(first) + timedelta(days=6)
    assert main(["report", "send", "weekly", "--date", f"{thursday:%Y-%m-%d}"]) == 0
    assert f"weekly_report {first}: 1 sent as report:weekly:{first}" in capsys.readouterr().out
    assert len(_outbox(on_sandbox)) == 1

    monkeypatch.setenv("FOLLOWUP_REPORT_RECIPIENTS", "")
    assert main(["report", "send", "weekly", "--force"]) == 1
    assert "skipped: FOLLOWUP_REPORT_RECIPIENTS is empty" in capsys.readouterr().out
    assert len(_outbox(on_sandbox)) == 1
