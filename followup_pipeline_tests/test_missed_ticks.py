"""Ticks missed while the daemon was down, on the instance of the root ``dagster.yaml``: one
iteration of Dagster's scheduler (what the daemon does every minute) after a simulated downtime,
on the machine's own schedules.

Dagster 1.13 runs the latest missed tick of each schedule and only that one, late, with that
tick's time and partition: for a schedule of an unpartitioned job (``enrich_hourly``), of a
partitioned one (``evaluate_business_hours``, ``morning_report_weekdays``) and for the one that
``build_schedule_from_partitioned_job`` makes (``weekly_report_friday``) alike. A tick whose
evaluation failed is tried again at the next iteration (``max_tick_retries``).

Dagster has no public API for a scheduler iteration: this module uses its test helpers and the
iteration function the daemon runs (private modules; the package itself imports none).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from followup_pipeline.engine import runs as engine_runs

from .scheduling import DEPRECATIONS, NOT_CAUGHT_UP, Scheduler

pytestmark = DEPRECATIONS
BERLIN = ZoneInfo("Europe/Berlin")
#: The daemon's last iteration before it went down: Thursday 5 March 2026, 10:05 in Berlin.
DOWN = datetime(2026, 3, 5, 10, 5, tzinfo=BERLIN)
#: Back on Saturday 14 March, 12:00: seven business days of ticks missed, two Fridays among them.
BACK = datetime(2026, 3, 14, 12, 0, tzinfo=BERLIN)


def test_missed_ticks_only_the_latest_of_each_schedule_runs(
    scheduler: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    assert scheduler.instance.scheduler.max_catchup_runs == 1  # type: ignore[union-attr]
    assert scheduler.iterate(DOWN) == []
    assert scheduler.runs() == {}

    with caplog.at_level(logging.INFO, logger="followup_tests.scheduler"):
        assert scheduler.iterate(BACK, restarted=True) == []
    # Dozens of ticks missed (every business hour, two Fridays): one run each, the latest.
    friday = datetime(2026, 3, 13, tzinfo=BERLIN)
    assert scheduler.runs() == {
        "evaluate_business_hours": [(friday.replace(hour=23), "2026-03-13-23:00")],
        # Every hour, weekends too: the latest is the half hour before the machine came back.
        "enrich_hourly": [(friday.replace(day=14, hour=11, minute=30), None)],
        "morning_report_weekdays": [(friday.replace(hour=7, minute=30), "2026-03-13")],
        "weekly_report_friday": [(friday.replace(hour=15), "2026-03-13")],
        # Every night, weekends too: the latest missed night is Saturday's.
        "crm_changes_nightly": [(friday.replace(day=14, hour=2), None)],
        # Every quarter hour: the latest is the one just before the machine came back.
        "lms_reminders_every_15_min": [(friday.replace(day=14, hour=12), None)],
        "lms_weekly_monday": [(friday.replace(day=9, hour=7), None)],
        "ops_weekly_monday": [(friday.replace(day=9, hour=7, minute=15), None)],
        "purge_nightly": [(friday.replace(day=14, hour=3, minute=15), None)],
        "backup_nightly": [(friday.replace(day=14, hour=3, minute=45), None)],
    }
    # Not max_catchup_runs: every schedule built from code counts as one without partitions
    # (each that missed more than one tick says so; the weekly mail missed one).
    assert sum(NOT_CAUGHT_UP in message for message in caplog.messages) == 8, caplog.messages

    # The missed ticks left no record, and the daemon does not come back to them.
    assert scheduler.ticks() == dict.fromkeys(scheduler.runs(), 1)
    assert scheduler.iterate(datetime(2026, 3, 15, 23, 59, tzinfo=BERLIN), restarted=True) == []
    # Only Sunday night's sweep, purge and backup, the latest half hour of enrich and the
    # latest quarter hour are new (the business-day schedules skip the weekend).
    runs = scheduler.runs()
    assert sum(len(runs) for runs in runs.values()) == 15
    assert runs["crm_changes_nightly"][0][0] == datetime(2026, 3, 15, 2, 0, tzinfo=BERLIN)


def test_missed_ticks_a_failed_tick_is_tried_again(
    scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert scheduler.instance.scheduler.max_tick_retries >= 1  # type: ignore[union-attr]
    assert scheduler.iterate(datetime(2026, 3, 5, 10, 35, tzinfo=BERLIN)) == []
    failures: list[str] = []
    calendar = engine_runs.business_calendar

    def failing_once(*args: Any) -> Any:
        if not failures:
            failures.append("failed")
            raise RuntimeError("the calendar failed once")
        return calendar(*args)

    monkeypatch.setattr(engine_runs, "business_calendar", failing_once)
    # 11:00's tick of evaluate fails (and would be lost with max_tick_retries: 0) ...
    (error,) = scheduler.iterate(datetime(2026, 3, 5, 11, 0, 30, tzinfo=BERLIN))
    assert "the calendar failed once" in str(error)
    eleven = datetime(2026, 3, 5, 11, 0, tzinfo=BERLIN)
    quarter = {"lms_reminders_every_15_min": [(eleven, None)]}  # its own tick, unaffected
    assert scheduler.runs() == quarter
    # ... and is evaluated again at the next iteration, a minute later: its run, its partition.
    assert scheduler.iterate(datetime(2026, 3, 5, 11, 1, 30, tzinfo=BERLIN)) == []
    assert scheduler.runs() == {
        "evaluate_business_hours": [(eleven, "2026-03-05-11:00")],
        **quarter,
    }
