"""The team's business calendar: weekends and public holidays from the ``holidays`` package,
corrected by local overrides (a day off the package does not know, or a holiday the team works).

Pure: the overrides are handed in, nothing is read here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import holidays

#: ``add_business_days`` gives up after this many calendar days (a calendar with no business day).
MAX_SCAN_DAYS = 3660


@dataclass(frozen=True)
class BusinessCalendar:
    """Business days of one country (and optionally one subdivision), with local overrides."""

    country: str = "DE"
    subdivision: str | None = None
    extra_holidays: frozenset[date] = frozenset()
    extra_workdays: frozenset[date] = frozenset()
    _public: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        public = holidays.country_holidays(self.country, subdiv=self.subdivision)
        object.__setattr__(self, "_public", public)

    @classmethod
    def with_overrides(
        cls, country: str, subdivision: str | None, overrides: Iterable[tuple[date, str]]
    ) -> BusinessCalendar:
        """Build a calendar from ``(day, kind)`` rows, ``kind`` being 'holiday' or 'workday'."""
        rows = list(overrides)
        return cls(
            country=country,
            subdivision=subdivision,
            extra_holidays=frozenset(day for day, kind in rows if kind == "holiday"),
            extra_workdays=frozenset(day for day, kind in rows if kind == "workday"),
        )

    def holiday_name(self, day: date) -> str | None:
        """The public holiday on ``day``, if the package knows one."""
        name = self._public.get(day)
        return str(name) if name else None

    def is_business_day(self, day: date) -> bool:
        """A local override wins; otherwise Monday to Friday and not a public holiday."""
        if day in self.extra_workdays:
            return True
        if day in self.extra_holidays:
            return False
        return day.weekday() < 5 and day not in self._public

    def add_business_days(self, start: date, days: int) -> date:
        """The ``days``-th business day strictly after ``start`` (``start`` itself for 0)."""
        if days < 0:
            raise ValueError("days must be 0 or more")
        current, remaining, scanned = start, days, 0
        while remaining > 0:
            current += timedelta(days=1)
            scanned += 1
            if scanned > MAX_SCAN_DAYS:
                raise ValueError("no business day within ten years: check the holiday overrides")
            if self.is_business_day(current):
                remaining -= 1
        return current

    def business_days_back(self, last: date, count: int) -> list[date]:
        """The ``count`` business days up to ``last`` (itself included if one), oldest first."""
        days: list[date] = []
        day = last
        while len(days) < count and (last - day).days <= MAX_SCAN_DAYS:
            if self.is_business_day(day):
                days.append(day)
            day -= timedelta(days=1)
        return days[::-1]

    def business_days_between(self, start: date, end: date) -> int:
        """How many business days lie in ``(start, end]``; 0 when ``end <= start``."""
        count, current = 0, start
        while current < end:
            current += timedelta(days=1)
            if self.is_business_day(current):
                count += 1
        return count


def next_business_hour(
    now: datetime, calendar: BusinessCalendar, *, zone: str, start_hour: int, end_hour: int
) -> datetime:
    """The first full hour after ``now`` on a business day (Monday to Friday) between
    ``start_hour`` and ``end_hour`` in ``zone``: when an hourly business-hours schedule ticks."""
    local = now.astimezone(ZoneInfo(zone))
    day, hour = local.date(), max(local.hour + 1, start_hour)
    for _ in range(366):
        if hour < end_hour and day.weekday() < 5 and calendar.is_business_day(day):
            return datetime.combine(day, time(hour), tzinfo=ZoneInfo(zone))
        day, hour = day + timedelta(days=1), start_hour
    raise ValueError(f"no business day within a year of {day}")
