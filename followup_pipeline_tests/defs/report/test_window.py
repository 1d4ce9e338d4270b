"""A report job launched without a partition sends its current window, once."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest

from followup_pipeline.defs import report
from followup_pipeline.defs.report.window import Kind, current_window, window_of

from ..evaluate.conftest import MONDAY, Machine


@pytest.mark.parametrize(
    ("kind", "day", "window"),
    [
        ("morning", date(2026, 3, 9), date(2026, 3, 9)),  # a Monday: its own day
        ("morning", date(2026, 3, 13), date(2026, 3, 13)),  # a Friday
        ("morning", date(2026, 3, 14), date(2026, 3, 13)),  # Saturday: the Friday before
        ("morning", date(2026, 3, 15), date(2026, 3, 13)),  # Sunday: the Friday before
        ("weekly", date(2026, 3, 13), date(2026, 3, 13)),  # a Friday: that week
        ("weekly", date(2026, 3, 12), date(2026, 3, 6)),  # a Thursday: the latest Friday
        ("weekly", date(2026, 3, 15), date(2026, 3, 13)),
    ],
)
def test_the_current_window_is_a_partition_that_has_begun(
    kind: Kind, day: date, window: date
) -> None:
    assert window_of(kind, day) == window


def test_the_current_window_is_the_teams_day() -> None:
    # 23:30 UTC on a Sunday is Monday in Berlin.
    late_sunday = datetime(2026, 3, 8, 23, 30, tzinfo=UTC)
    assert current_window("morning", late_sunday, "Europe/Berlin") == "2026-03-09"
    assert current_window("morning", late_sunday, "UTC") == "2026-03-06"


def _run(machine: Machine, name: str, now: datetime, **config: Any) -> Any:
    job = machine.job(report, name, machine.resources(now))
    op = "send_morning_list" if name == "morning_report" else "send_weekly_overview"
    return job.execute_in_process(
        instance=machine.instance, run_config={"ops": {op: {"config": config}}}
    )


def _report_keys(db: psycopg.Connection[Any]) -> list[str]:
    return [
        r["idempotency_key"]
        for r in db.execute("SELECT idempotency_key FROM actions WHERE kind = 'report' ORDER BY id")
    ]


def test_a_report_job_without_a_partition_sends_the_current_window_once(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.deal(name="Fenster GmbH")
    machine.evaluate(MONDAY)
    # Its first step is due on Friday the 6th (as if it had entered its stage a week earlier).
    db.execute("UPDATE watch_steps SET due_on = '2026-03-06' WHERE step_no = 1")
    saturday = MONDAY + timedelta(days=5)  # 7 March 2026, 09:00 Berlin

    assert _run(machine, "morning_report", saturday).success  # no partition key: no failure
    [mail] = machine.outbox()
    # Sent on the Saturday after its Friday: its subject says it is late.
    assert mail["message"]["subject"] == "late: Follow-ups for 2026-03-06"
    # The window is the partition's: a second run without a key, or with it, sends nothing.
    assert _run(machine, "morning_report", saturday).success
    job = machine.job(report, "morning_report", machine.resources(saturday))
    assert job.execute_in_process(instance=machine.instance, partition_key="2026-03-06").success
    assert len(machine.outbox()) == 1
    assert _run(machine, "morning_report", saturday, force=True).success
    assert len(machine.outbox()) == 2

    assert _run(machine, "weekly_report", saturday).success  # the week ending Friday 6 March
    assert _report_keys(db) == [
        "report:morning:2026-03-06",
        "report:morning:2026-03-06#1",
        "report:weekly:2026-03-06",
    ]
