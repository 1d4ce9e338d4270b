"""When a schedule's cron last fired, read as Dagster reads it (the watchdog, ``followup
watchdog``): five fields (minute, hour, day of month, month, day of week; ``*``, lists, ranges,
steps), matched on the wall clock of the schedule's zone. Where the clock jumps it errs early, never
late (a look must not call a tick missed that Dagster never meant): a wall time skipped in spring
does not fire (Dagster fires it at the jump: the day before is taken); a wall time repeated in
autumn fires at its second occurrence for a cron of some hours, as Dagster does. Pure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

#: The fields' ranges: minute, hour, day of month, month, day of week (0 or 7: Sunday).
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
#: How far back a fire is looked for (a weekly schedule's, with a holiday week to spare).
LOOK_BACK = timedelta(days=15)


class CronError(ValueError):
    """A cron string this reading does not take."""


def _field(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, last = base.split("-", 1)
            start, end = int(first), int(last)
        else:
            start = int(base)
            end = high if step_text else start
        if not (low <= start <= end <= high) or step < 1:
            raise CronError(f"{part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def parse(cron: str) -> tuple[frozenset[int], ...]:
    """The five fields of ``cron`` as sets of values (day of week 7 read as 0, Sunday)."""
    parts = cron.split()
    if len(parts) != 5:
        raise CronError(f"{cron!r}: five fields expected")
    try:
        fields = [_field(p, lo, hi) for p, (lo, hi) in zip(parts, _RANGES, strict=True)]
    except ValueError as error:
        raise CronError(f"{cron!r}: {error}") from None
    weekdays = fields[4]
    fields[4] = frozenset((d % 7) for d in weekdays)
    return tuple(fields)


def _matches(fields: tuple[frozenset[int], ...], local: datetime, restricted: bool) -> bool:
    minute, hour, mday, month, wday = fields
    if local.minute not in minute or local.hour not in hour or local.month not in month:
        return False
    cron_weekday = (local.weekday() + 1) % 7  # cron: Sunday 0
    day_ok, weekday_ok = local.day in mday, cron_weekday in wday
    # Cron's rule: with both day fields restricted, either one matching is enough.
    return (day_ok or weekday_ok) if restricted else (day_ok and weekday_ok)


def last_fire(cron: str, zone: str, before: datetime) -> datetime | None:
    """The latest moment at or before ``before`` that ``cron`` fires in ``zone`` (UTC), within
    ``LOOK_BACK``; None when it fired in none of it."""
    fields = parse(cron)
    parts = cron.split()
    restricted = parts[2] != "*" and parts[4] != "*"
    tz = ZoneInfo(zone)
    moment = before.astimezone(UTC).replace(second=0, microsecond=0)
    end = moment - LOOK_BACK
    while moment >= end:
        local = moment.astimezone(tz)
        if not _hour_may_match(fields, local, restricted):
            moment -= timedelta(minutes=local.minute + 1)  # to the hour before (its :59)
            continue
        if _matches(fields, local, restricted) and not _first_of_two(local, fields):
            return moment
        moment -= timedelta(minutes=1)
    return None


def _hour_may_match(fields: tuple[frozenset[int], ...], local: datetime, restricted: bool) -> bool:
    """Whether any minute of ``local``'s hour may fire (its day and hour match)."""
    return _matches((frozenset(range(60)), *fields[1:]), local.replace(minute=0), restricted)


def _first_of_two(local: datetime, fields: tuple[frozenset[int], ...]) -> bool:
    """Whether ``local`` is the first of a wall time the autumn's clock repeats, for a cron of
    some hours only: Dagster fires those at the second (every hour's crons fire at both)."""
    other = local.replace(fold=1 - local.fold).utcoffset()
    return local.fold == 0 and other != local.utcoffset() and len(fields[1]) < 24
