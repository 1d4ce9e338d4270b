"""Local dates and UTC around the DST days of Europe/Berlin."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, timezone

import pytest

from followup_pipeline.domain.localtime import (
    ZonedInstant,
    due_through,
    for_people,
    hours_in_local_day,
    local_date,
    local_to_utc,
    require_aware,
    start_of_day_utc,
)

ZONE = "Europe/Berlin"
SPRING = date(2026, 3, 29)  # 02:00 → 03:00
AUTUMN = date(2026, 10, 25)  # 03:00 → 02:00


@pytest.mark.parametrize(
    ("instant", "through"),
    [
        (datetime(2026, 3, 2, 5, 59, tzinfo=UTC), date(2026, 3, 1)),  # 06:59 in Berlin
        (datetime(2026, 3, 2, 6, 0, tzinfo=UTC), date(2026, 3, 2)),  # 07:00
        (datetime(2026, 3, 2, 23, 30, tzinfo=UTC), date(2026, 3, 2)),  # 00:30 the next day
        (datetime(2026, 3, 30, 5, 0, tzinfo=UTC), date(2026, 3, 30)),  # 07:00 in summer time
    ],
)
def test_localtime_due_through_the_day_from_its_working_start(
    instant: datetime, through: date
) -> None:
    assert due_through(instant, ZONE, 7) == through


def test_localtime_dst_days_have_23_and_25_hours() -> None:
    assert hours_in_local_day(SPRING, ZONE) == 23
    assert hours_in_local_day(AUTUMN, ZONE) == 25
    assert hours_in_local_day(date(2026, 3, 30), ZONE) == 24


def test_localtime_skipped_wall_time_moves_forward() -> None:
    assert local_to_utc(SPRING, time(2, 30), ZONE) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert local_to_utc(SPRING, time(3, 30), ZONE) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert local_to_utc(SPRING, time(1, 30), ZONE) == datetime(2026, 3, 29, 0, 30, tzinfo=UTC)


def test_localtime_repeated_wall_time_takes_first_occurrence() -> None:
    assert local_to_utc(AUTUMN, time(2, 30), ZONE) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert local_to_utc(AUTUMN, time(3, 30), ZONE) == datetime(2026, 10, 25, 2, 30, tzinfo=UTC)


def test_localtime_start_of_day_in_winter_and_summer() -> None:
    assert start_of_day_utc(date(2026, 1, 15), ZONE) == datetime(2026, 1, 14, 23, tzinfo=UTC)
    assert start_of_day_utc(date(2026, 7, 15), ZONE) == datetime(2026, 7, 14, 22, tzinfo=UTC)


@pytest.mark.parametrize(
    ("instant", "expected"),
    [
        (datetime(2026, 3, 28, 23, 30, tzinfo=UTC), date(2026, 3, 29)),
        (datetime(2026, 3, 29, 21, 59, tzinfo=UTC), date(2026, 3, 29)),
        (datetime(2026, 3, 29, 22, 0, tzinfo=UTC), date(2026, 3, 30)),
        (datetime(2026, 10, 24, 21, 59, tzinfo=UTC), date(2026, 10, 24)),
        (datetime(2026, 10, 25, 22, 59, tzinfo=UTC), date(2026, 10, 25)),
        (datetime(2026, 10, 25, 23, 0, tzinfo=UTC), date(2026, 10, 26)),
        (datetime(2026, 12, 31, 23, 30, tzinfo=UTC), date(2027, 1, 1)),
    ],
)
def test_localtime_local_date_across_dst_and_year_end(instant: datetime, expected: date) -> None:
    assert local_date(instant, ZONE) == expected


def test_localtime_zoned_instant_keeps_zone_name() -> None:
    stamp = ZonedInstant(datetime(2026, 10, 25, 0, 30, tzinfo=UTC), ZONE)
    again = ZonedInstant(stamp.utc + timedelta(hours=1), ZONE)
    assert stamp.local.hour == again.local.hour == 2  # the repeated hour
    assert stamp.local.utcoffset() != again.local.utcoffset()
    assert stamp.local_date == AUTUMN


def test_localtime_rejects_naive_instants() -> None:
    with pytest.raises(ValueError, match="naive"):
        require_aware(datetime(2026, 3, 2, 9, 0))
    assert require_aware(datetime(2026, 3, 2, 10, 0, tzinfo=timezone(timedelta(hours=1)))) == (
        datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    )


@pytest.mark.parametrize(
    ("instant", "zone", "shown"),
    [
        (
            datetime(2026, 3, 2, 8, 0, 12, 345678, tzinfo=UTC),
            "Europe/Berlin",
            "2026-03-02 09:00 CET",
        ),
        (datetime(2026, 7, 1, 8, 0, tzinfo=UTC), "Europe/Berlin", "2026-07-01 10:00 CEST"),
        (datetime(2026, 7, 1, 8, 0, tzinfo=UTC), "America/New_York", "2026-07-01 04:00 EDT"),
        (None, "Europe/Berlin", "—"),
    ],
)
def test_localtime_for_people_is_the_teams_time_with_its_zone(
    instant: datetime | None, zone: str, shown: str
) -> None:
    assert for_people(instant, zone) == shown
