"""Business-day arithmetic, against plain date arithmetic as the baseline."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from benchmarks.harness import timed
from followup_pipeline.domain.cadence import DEFAULT_CADENCE, plan_steps
from followup_pipeline.domain.calendar import BusinessCalendar

REPEAT = 2000
DAYS = [date(2026, 1, 1) + timedelta(days=n) for n in range(365)]


def run() -> list[dict[str, Any]]:
    """Rows of the benchmark table (seconds per 365 operations)."""
    calendar = BusinessCalendar("DE", "BY")

    def plain() -> None:
        for day in DAYS:
            day + timedelta(days=29)

    def business() -> None:
        for day in DAYS:
            calendar.add_business_days(day, 21)

    def plans() -> None:
        for day in DAYS:
            plan_steps(day, DEFAULT_CADENCE, calendar)

    baseline = timed(plain, REPEAT // 10)
    rows = [("date + timedelta, 365 days (baseline)", baseline)]
    rows.append(("add_business_days(day, 21), 365 days, DE-BY", timed(business, REPEAT // 100)))
    rows.append(("plan_steps(day, 5/12/21), 365 days, DE-BY", timed(plans, REPEAT // 100)))
    return [{"benchmark": name, "seconds": s, "ratio": s / baseline} for name, s in rows]
