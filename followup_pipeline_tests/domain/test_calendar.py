"""Business calendar: weekends, German holidays, a subdivision's own, overrides, year ends."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from followup_pipeline.domain.calendar import BusinessCalendar, next_business_hour

DE = BusinessCalendar("DE")
BY = BusinessCalendar("DE", "BY")


@pytest.mark.parametrize(
    ("day", "expected"),
    [
        (date(2026, 3, 6), True),  # Friday
        (date(2026, 3, 7), False),  # Saturday
        (date(2026, 3, 8), False),  # Sunday
        (date(2026, 1, 1), False),  # New Year's Day
        (date(2026, 4, 3), False),  # Good Friday
        (date(2026, 4, 6), False),  # Easter Monday
        (date(2026, 5, 1), False),  # Labour Day
        (date(2026, 5, 14), False),  # Ascension Day
        (date(2026, 5, 25), False),  # Whit Monday
        (date(2026, 10, 3), False),  # German Unity Day (a Saturday anyway)
        (date(2026, 12, 24), True),  # Christmas Eve is a working day
        (date(2026, 12, 25), False),
        (date(2026, 12, 26), False),
        (date(2026, 1, 6), True),  # Epiphany is not national
    ],
)
def test_calendar_is_business_day_nationally(day: date, expected: bool) -> None:
    assert DE.is_business_day(day) is expected


def test_calendar_bavaria_keeps_epiphany() -> None:
    assert not BY.is_business_day(date(2026, 1, 6))
    assert BY.holiday_name(date(2026, 1, 6)) is not None
    assert DE.add_business_days(date(2026, 1, 5), 1) == date(2026, 1, 6)
    assert BY.add_business_days(date(2026, 1, 5), 1) == date(2026, 1, 7)


@pytest.mark.parametrize(
    ("start", "days", "expected"),
    [
        (date(2026, 3, 6), 1, date(2026, 3, 9)),  # Friday → Monday
        (date(2026, 3, 7), 1, date(2026, 3, 9)),  # Saturday → Monday
        (date(2026, 3, 6), 5, date(2026, 3, 13)),  # Friday → next Friday
        (date(2026, 3, 6), 0, date(2026, 3, 6)),
        (date(2026, 12, 23), 1, date(2026, 12, 24)),
        (date(2026, 12, 23), 2, date(2026, 12, 28)),  # over Christmas and a weekend
        (date(2026, 12, 30), 2, date(2027, 1, 4)),  # over New Year and a weekend
        (date(2026, 12, 31), 5, date(2027, 1, 8)),  # into the next year
        (date(2026, 4, 2), 1, date(2026, 4, 7)),  # over Easter
    ],
)
def test_calendar_add_business_days(start: date, days: int, expected: date) -> None:
    assert DE.add_business_days(start, days) == expected


def test_calendar_rejects_negative_days() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        DE.add_business_days(date(2026, 3, 6), -1)


def test_calendar_local_overrides_win() -> None:
    calendar = BusinessCalendar.with_overrides(
        "DE", None, [(date(2026, 3, 9), "holiday"), (date(2026, 12, 25), "workday")]
    )
    assert not calendar.is_business_day(date(2026, 3, 9))
    assert calendar.add_business_days(date(2026, 3, 6), 1) == date(2026, 3, 10)
    assert calendar.is_business_day(date(2026, 12, 25))


def test_calendar_business_days_between_counts_half_open_range() -> None:
    assert DE.business_days_between(date(2026, 3, 6), date(2026, 3, 13)) == 5
    assert DE.business_days_between(date(2026, 3, 13), date(2026, 3, 6)) == 0


days = st.dates(min_value=date(2020, 1, 1), max_value=date(2035, 12, 31))
counts = st.integers(min_value=0, max_value=60)


@settings(max_examples=200, deadline=None)
@given(first=days, gap=st.integers(min_value=0, max_value=400), n=counts)
def test_calendar_add_business_days_is_monotonic(first: date, gap: int, n: int) -> None:
    second = first + timedelta(days=gap)
    assert BY.add_business_days(first, n) <= BY.add_business_days(second, n)
    assert BY.add_business_days(first, n) <= BY.add_business_days(first, n + 1)


@settings(max_examples=200, deadline=None)
@given(start=days, n=st.integers(min_value=1, max_value=60))
def test_calendar_add_business_days_lands_on_business_days(start: date, n: int) -> None:
    landed = BY.add_business_days(start, n)
    assert BY.is_business_day(landed)
    assert landed > start
    assert BY.business_days_between(start, landed) == n


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        ("2026-03-02T09:05:00+01:00", "2026-03-02T10:00:00+01:00"),  # Monday morning
        ("2026-03-02T06:10:00+01:00", "2026-03-02T07:00:00+01:00"),  # before the first hour
        ("2026-03-06T18:30:00+01:00", "2026-03-09T07:00:00+01:00"),  # Friday evening
        ("2026-04-02T18:00:00+02:00", "2026-04-07T07:00:00+02:00"),  # Good Friday, Easter Monday
        ("2026-03-27T17:59:00+01:00", "2026-03-27T18:00:00+01:00"),  # the last hour of a day
        ("2026-03-29T01:30:00+01:00", "2026-03-30T07:00:00+02:00"),  # the DST night (Sunday)
    ],
)
def test_calendar_next_business_hour(now: str, expected: str) -> None:
    calendar = BusinessCalendar("DE")
    found = next_business_hour(
        datetime.fromisoformat(now), calendar, zone="Europe/Berlin", start_hour=7, end_hour=19
    )
    assert found == datetime.fromisoformat(expected)
