"""The watchdog's reading of a schedule's cron against Dagster's own (its private iterator, read
here only): on ordinary days they agree to the minute; where the clock jumps (Berlin, New York,
Sydney; spring and autumn) the watchdog's is never later than Dagster's, so a look never calls a
tick missed that Dagster never meant to run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from dagster._utils.schedules import reverse_cron_string_iterator

from followup_pipeline.domain.cron import CronError, last_fire, parse

#: The machine's crons and a few more shapes.
CRONS = ["30 7 * * 1-5", "0 7-18 * * 1-5", "*/15 * * * *", "15 7 * * 1", "0 2 * * *",
         "30 2 * * *", "0 15 * * 5", "0 9 1,15 * 1"]  # fmt: skip
#: Days the clock jumps, and an ordinary one.
STARTS = {
    "Europe/Berlin": [datetime(2026, 3, 29, tzinfo=UTC), datetime(2026, 10, 25, tzinfo=UTC)],
    "America/New_York": [datetime(2026, 3, 8, 5, tzinfo=UTC),
                         datetime(2026, 11, 1, 4, tzinfo=UTC)],
    "Australia/Sydney": [datetime(2026, 4, 4, 14, tzinfo=UTC),
                         datetime(2026, 10, 3, 14, tzinfo=UTC)],
}  # fmt: skip
ORDINARY = datetime(2026, 6, 3, tzinfo=UTC)


def _dagster(cron: str, zone: str, before: datetime) -> datetime:
    return next(reverse_cron_string_iterator(before.timestamp(), cron, zone)).astimezone(UTC)


@pytest.mark.parametrize("zone", sorted(STARTS))
def test_cron_is_dagsters_on_ordinary_days_and_never_later_where_the_clock_jumps(
    zone: str,
) -> None:
    for cron in CRONS:
        for minute in range(0, 24 * 60, 37):
            before = ORDINARY + timedelta(minutes=minute)
            assert last_fire(cron, zone, before) == _dagster(cron, zone, before), (cron, before)
        for start in STARTS[zone]:
            for minute in range(0, 8 * 60, 11):
                before = start + timedelta(minutes=minute)
                mine = last_fire(cron, zone, before)
                assert mine is not None
                assert mine <= _dagster(cron, zone, before), (cron, before)


def test_cron_refuses_what_it_does_not_read() -> None:
    assert parse("*/15 * * * 7")[4] == frozenset({0})  # Sunday as 7
    for wrong in ("* * * *", "61 * * * *", "0 25 * * *", "x * * * *"):
        with pytest.raises(CronError):
            parse(wrong)
