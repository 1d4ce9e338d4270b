"""When a watched stage has gone quiet (docs/architecture.md §13), from the census of the watched
stages: per business day, how many deals the CRM listed in each and how many began their
follow-up in it. The failure it is for: a renamed stage, a changed pipeline, an API user who
lost read rights on some deals; the CRM still knows the stage's name, so the stage-name check
passes, and every run is green while one stage lists nothing. Pure: the rows come from the
store (``store/census.py``).

Two rules, each over the last ``days`` business days (N, ``FOLLOWUP_CENSUS_QUIET_DAYS``):

- **emptied**: the stage listed no deal on each of them, and had deals before;
- **nothing enters**: no followed deal entered it (a watch opened in it, or a followed deal moved
  to it) on any of them (today left out: it is not over), while deals kept entering the other
  watched stages (on at least half of those days).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from followup_pipeline.domain.calendar import BusinessCalendar


@dataclass(frozen=True)
class Count:
    """One day's census of one stage."""

    day: date
    stage: str
    #: None: no reading that day.
    listed: int | None
    entered: int


@dataclass(frozen=True)
class Quiet:
    """A watched stage gone quiet: since which business day, and what was seen."""

    stage: str
    since: date
    rule: str
    message: str


def _emptied(stage: str, rows: dict[tuple[date, str], Count], days: Sequence[date]) -> Quiet | None:
    window = [rows.get((day, stage)) for day in days]
    if any(row is None or row.listed is None or row.listed for row in window):
        return None  # a day without a reading (evaluate's own alert) or with deals
    mine = sorted((row for (_, name), row in rows.items() if name == stage), key=lambda r: r.day)
    had = [row for row in mine if row.listed and row.day < days[0]]
    if not had:
        return None  # it never had deals: nothing went missing
    last = had[-1]
    since = min(row.day for row in mine if row.day > last.day and row.listed is not None)
    return Quiet(
        stage,
        since,
        "emptied",
        f"the CRM lists no deal in the watched stage {stage!r} since {since:%Y-%m-%d} "
        f"({len(days)} business days or more); on {last.day:%Y-%m-%d} it listed {last.listed}. "
        "A renamed stage, a changed pipeline or an API user who lost read rights would look so.",
    )


def _nothing_enters(
    stage: str, stages: Sequence[str], rows: dict[tuple[date, str], Count], days: Sequence[date]
) -> Quiet | None:
    mine = [rows.get((day, stage)) for day in days]
    if any(row is None or row.listed is None or row.entered for row in mine):
        return None  # a day without a reading decides nothing; an entry ends it
    others = [
        sum(row.entered for s in stages if s != stage and (row := rows.get((day, s))) is not None)
        for day in days
    ]
    busy = sum(1 for n in others if n)
    if busy * 2 < len(days) or not sum(others):
        return None  # the others were quiet too: a quiet week, not a lost stage
    # Since the day after its last entry (stable while the quiet lasts: one alert for it).
    mine_all = sorted(
        (row for (_, name), row in rows.items() if name == stage), key=lambda r: r.day
    )
    entries = [row.day for row in mine_all if row.entered]
    since = min(row.day for row in mine_all if not entries or row.day > entries[-1])
    return Quiet(
        stage,
        since,
        "nothing enters",
        f"no deal entered the watched stage {stage!r} since {since:%Y-%m-%d} ({len(days)} "
        f"business days or more), while {sum(others)} entered the other watched stages in the "
        f"last {len(days)}. Do deals still reach it under this name, and can the API user read "
        "them?",
    )


def quiet_stages(
    counts: Iterable[Count],
    stages: Sequence[str],
    *,
    listed_days: Sequence[date],
    entered_days: Sequence[date],
) -> list[Quiet]:
    """The watched ``stages`` gone quiet: emptied over ``listed_days`` (the last N business days
    up to today: what is listed is a stock, today's reading counts), or nothing entered over
    ``entered_days`` (the N business days before today: today is not over). Oldest first."""
    rows = {(row.day, row.stage): row for row in counts}
    found: list[Quiet] = []
    for stage in stages:
        quiet = _emptied(stage, rows, listed_days) if listed_days else None
        if quiet is None and entered_days:
            quiet = _nothing_enters(stage, stages, rows, entered_days)
        if quiet is not None:
            found.append(quiet)
    return found


def quiet_now(
    counts: Iterable[Count],
    stages: Sequence[str],
    *,
    calendar: BusinessCalendar,
    today: date,
    days: int,
) -> list[Quiet]:
    """The watched ``stages`` gone quiet as of ``today``, over the last ``days`` business days
    (``calendar``'s): what is listed up to today, what entered up to yesterday."""
    return quiet_stages(
        counts,
        stages,
        listed_days=calendar.business_days_back(today, days),
        entered_days=calendar.business_days_back(today - timedelta(days=1), days),
    )


#: The weeks the census is shown over (``followup doctor``, the weekly look).
WEEKS_SHOWN = 4


@dataclass(frozen=True)
class StageView:
    """A watched stage's census as people read it: deals listed at the latest reading, and how
    many entered in each of the last weeks (the current week first)."""

    stage: str
    listed: int | None
    entered_by_week: tuple[int, ...]

    def line(self) -> str:
        listed = "no reading yet" if self.listed is None else f"{self.listed} at the last reading"
        weeks = ", ".join(map(str, self.entered_by_week))
        return f"{listed}; entered by week, this week first: {weeks}"


def views(counts: Iterable[Count], stages: Sequence[str], today: date) -> list[StageView]:
    """Each watched stage's census over the last ``WEEKS_SHOWN`` weeks (Monday to Sunday)."""
    monday = today - timedelta(days=today.weekday())
    rows = sorted(counts, key=lambda row: row.day)
    result: list[StageView] = []
    for stage in stages:
        mine = [row for row in rows if row.stage == stage]
        weeks = tuple(
            sum(
                row.entered
                for row in mine
                if monday - timedelta(weeks=n) <= row.day < monday - timedelta(weeks=n - 1)
            )
            for n in range(WEEKS_SHOWN)
        )
        read = [row for row in mine if row.listed is not None]
        result.append(StageView(stage, read[-1].listed if read else None, weeks))
    return result
