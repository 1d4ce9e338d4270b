"""The Friday overview end to end: real Postgres, the sandbox's Graph, once per week."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import psycopg

from followup_pipeline.defs import report

from ..evaluate.conftest import MONDAY, Machine

FRIDAY_AFTERNOON = MONDAY + timedelta(days=11, hours=6)  # Friday 13 March 2026, 15:00 Berlin


def _weekly(machine: Machine, friday: str, **config: Any) -> Any:
    job = machine.job(report, "weekly_report", machine.resources(FRIDAY_AFTERNOON))
    run_config = {"ops": {"send_weekly_overview": {"config": config}}}
    return job.execute_in_process(
        instance=machine.instance, partition_key=friday, run_config=run_config
    )


def test_weekly_overview_counts_the_week_and_goes_out_once(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    deals = [machine.deal(name=f"Woche {n}") for n in range(3)]
    machine.evaluate(MONDAY)  # three watches opened in the week before
    machine.evaluate(MONDAY + timedelta(days=7))  # Monday 9 March: three tasks
    machine.move(deals[0], "Closed Won")
    machine.evaluate(MONDAY + timedelta(days=8))  # Tuesday: one watch closed, won

    result = _weekly(machine, "2026-03-13")
    assert result.success
    [mail] = machine.outbox()
    message = mail["message"]
    assert message["subject"] == "Weekly overview 2026-03-07 – 2026-03-13"
    html = message["body"]["content"]
    assert re.search(r'Tasks created</td><td align="right"[^>]*>3<', html)
    assert re.search(r'Deals no longer followed up: won</td><td align="right"[^>]*>1<', html)
    assert re.search(r'Proposal</td><td align="right"[^>]*>2<', html)  # two deals still open
    assert html.count('bgcolor="#4a7bd0"') == 20  # all three tasks on one day: the full bar
    assert _weekly(machine, "2026-03-13").success
    assert len(machine.outbox()) == 1
    assert _weekly(machine, "2026-03-13", force=True).success
    assert len(machine.outbox()) == 2
    previous = _weekly(machine, "2026-03-06")  # a backfilled week says it is late
    assert previous.success
    assert machine.outbox()[-1]["message"]["subject"].startswith("late: Weekly overview")


def test_weekly_figures_agree_and_the_chart_has_business_days_only(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    from followup_pipeline.defs.report.gather import weekly_data
    from followup_pipeline.settings import Settings

    for n in range(3):
        machine.deal(name=f"Alter {n}")
    machine.evaluate(MONDAY)
    # All opened the evening before their base date (the old average counted hours since
    # registration, the oldest whole days: an average of 24.0 beside an oldest of 23).
    db.execute("UPDATE watches SET registered_at = registered_at - interval '20 hours'")
    settings = Settings(database_url=machine.db_url, report_language="de")
    data = weekly_data(db, settings, FRIDAY_AFTERNOON.date(), FRIDAY_AFTERNOON, None)
    [stage] = data.open_by_stage
    assert stage.count == 3
    assert stage.average_age_days == stage.oldest_age_days == 11  # 2 to 13 March
    # Opened on different days: the average lies between, the oldest is the oldest.
    db.execute("UPDATE watches SET base_on = base_on - (id % 3)::int * 4")
    data = weekly_data(db, settings, FRIDAY_AFTERNOON.date(), FRIDAY_AFTERNOON, None)
    [stage] = data.open_by_stage
    assert (stage.average_age_days, stage.oldest_age_days) == (15.0, 19)
    # Monday to Friday: no Saturday or Sunday in the chart.
    assert [d.weekday() for d in data.tasks_per_day] == [0, 1, 2, 3, 4]
