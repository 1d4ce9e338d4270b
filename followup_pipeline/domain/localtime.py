"""Local dates and UTC instants in the team's time zone, the zone's name kept beside them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo


@dataclass(frozen=True)
class ZonedInstant:
    """A UTC instant and the zone in which it is read."""

    utc: datetime
    zone: str

    @property
    def local(self) -> datetime:
        """The wall-clock time in ``zone``."""
        return self.utc.astimezone(ZoneInfo(self.zone))

    @property
    def local_date(self) -> date:
        """The calendar date in ``zone``."""
        return self.local.date()


def require_aware(instant: datetime) -> datetime:
    """Reject naive datetimes: every instant carries its offset."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"naive datetime {instant.isoformat()}: an offset is required")
    return instant.astimezone(UTC)


def for_people(instant: datetime | None, zone: str) -> str:
    """An instant as a person reads it: the local time in ``zone`` with the zone's abbreviation
    (``2026-03-02 09:00 CET``), no seconds; ``—`` for none. Raw UTC is for machine output."""
    if instant is None:
        return "—"
    return f"{require_aware(instant).astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M %Z}"


def time_of_day_for_people(instant: datetime, zone: str) -> str:
    """The time of day of ``instant`` in ``zone`` with the zone's abbreviation, to the second
    (``09:00:05 CET``): the stamp of a console line, read as it scrolls by on the same day, where
    the date would be noise and the seconds tell lines apart. Not the host's zone: the team's."""
    return f"{require_aware(instant).astimezone(ZoneInfo(zone)):%H:%M:%S %Z}"


def local_date(instant: datetime, zone: str) -> date:
    """The calendar date of ``instant`` in ``zone``."""
    return require_aware(instant).astimezone(ZoneInfo(zone)).date()


def due_through(instant: datetime, zone: str, opens: int) -> date:
    """The last day whose steps are due at ``instant``: a step is due at ``opens`` o'clock of
    its day in ``zone`` (the working day's start), so before that hour only the days before
    are (an ``evaluate`` at 00:00 does not make the day's tasks at midnight)."""
    local = require_aware(instant).astimezone(ZoneInfo(zone))
    return local.date() if local.hour >= opens else local.date() - timedelta(days=1)


def local_to_utc(day: date, at: time, zone: str) -> datetime:
    """The UTC instant of wall-clock ``at`` on ``day`` in ``zone``.

    A wall time skipped by DST (02:30 on the spring day) is taken as the instant an hour later
    on the clock (03:30, i.e. the same elapsed time after 02:00); a repeated one (the autumn day)
    is its first occurrence.
    """
    tz = ZoneInfo(zone)
    naive = datetime.combine(day, at)
    first = naive.replace(tzinfo=tz, fold=0)
    # A nonexistent wall time does not survive the round trip through UTC.
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != naive:
        shifted = (naive + timedelta(hours=1)).replace(tzinfo=tz, fold=0)
        return shifted.astimezone(UTC)
    return first.astimezone(UTC)


def start_of_day_utc(day: date, zone: str) -> datetime:
    """The UTC instant at which local ``day`` begins."""
    return local_to_utc(day, time(0, 0), zone)


def hours_in_local_day(day: date, zone: str) -> float:
    """23, 24 or 25: the length of local ``day``."""
    start = start_of_day_utc(day, zone)
    end = start_of_day_utc(day + timedelta(days=1), zone)
    return (end - start).total_seconds() / 3600
