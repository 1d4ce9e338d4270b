"""The current window of a report: the partition a send "now" means.

The morning list has one partition per weekday: on a weekday its own day, on a Saturday or a
Sunday the Friday before (the latest morning list that exists). The Friday overview's partitions
are keyed by their Friday: on a Friday that day, on any other day the latest Friday before it
(the last week that has ended or is ending). Both keys exist in the partitions definitions from
that day on (``end_offset=1``), so Dagster accepts them as soon as the day has begun.
"""

from datetime import date, datetime, timedelta
from typing import Literal

from followup_pipeline.domain.localtime import local_date

Kind = Literal["morning", "weekly"]
FRIDAY = 4


def window_of(kind: Kind, day: date) -> date:
    """The report's partition day that ``day`` falls in (see the module's docstring)."""
    if kind == "morning":
        return day - timedelta(days=max(0, day.weekday() - FRIDAY))  # Sat: 1 back, Sun: 2
    return day - timedelta(days=(day.weekday() - FRIDAY) % 7)


def current_window(kind: Kind, now: datetime, zone: str) -> str:
    """The partition key (``YYYY-MM-DD``) of the report's current window at ``now`` in ``zone``."""
    return f"{window_of(kind, local_date(now, zone)):%Y-%m-%d}"
