"""What a Dagster run of any pipeline reports, and when a schedule's tick is a business day.

A run's outcome is the tag ``followup/outcome`` (``ok``, ``partial``, ``skipped``); its business
counts are the op's output and metadata, and the non-zero ones a short tag for lists of runs.
"""

from datetime import date
from typing import Literal
from zoneinfo import ZoneInfo

import dagster as dg

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.engine.scope import Database
from followup_pipeline.engine.scope import RunCounts as RunCounts
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import StoreError
from followup_pipeline.store.holidays import load_calendar
from followup_pipeline.store.presence import TAG as PRESENCE_TAG
from followup_pipeline.store.presence import TAG_EXPECTED as PRESENCE_EXPECTED

OUTCOME_TAG = "followup/outcome"
#: The run's business counts in one short line (``opened=2 fired=3``), for lists of runs.
COUNTS_TAG = "followup/counts"
COUNTS_TAG_MAX = 200
SINGLETON_TAG = "followup/singleton"
#: Run monitoring (dagster.yaml) fails a run that outlives this tag's seconds: every job has one,
#: so no hung run holds its queue or its lock for good.
MAX_RUNTIME_TAG = "dagster/max_runtime"

Outcome = Literal["ok", "partial", "skipped"]


def time_limit(seconds: int, *, presence: bool = True) -> dict[str, str]:
    """The tags of a job: a time limit of ``seconds``, and (``presence``: its ops hold the
    ``postgres`` resource) that its runs hold a presence, so that the ``dead_runs`` sensor
    judges a run killed before its first step opened one (``engine/reaper.py``)."""
    tags = {MAX_RUNTIME_TAG: str(seconds)}
    if presence:
        tags[PRESENCE_TAG] = PRESENCE_EXPECTED
    return tags


def outcome_output(
    context: dg.OpExecutionContext, outcome: Outcome, counts: RunCounts
) -> dg.Output[RunCounts]:
    """Tag the run with its outcome and return the counts as the op's output, with metadata."""
    line = counts_line(counts)
    context.instance.add_run_tags(
        context.run_id, {OUTCOME_TAG: outcome, **({COUNTS_TAG: line} if line else {})}
    )
    context.log.info("outcome %s: %s", outcome, dict(counts))
    return dg.Output(dict(counts), metadata={"outcome": outcome, **counts})


def skipped_output(context: dg.OpExecutionContext, reason: str) -> dg.Output[RunCounts]:
    """A run that had nothing it could do, and why."""
    context.log.info("skipped: %s", reason)
    return outcome_output(context, "skipped", {"reason": reason})


def counts_line(counts: RunCounts) -> str:
    """The non-zero numbers of ``counts`` as ``name=value`` words, cut to a tag's length."""
    words = [
        f"{name}={value}"
        for name, value in counts.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and value
    ]
    line = " ".join(words)
    return line if len(line) <= COUNTS_TAG_MAX else line[: COUNTS_TAG_MAX - 1] + "…"


def calendar_of(db: Database, settings: Settings) -> BusinessCalendar:
    """The business calendar: public holidays and the database's local overrides."""
    with db.connection() as conn:
        return load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)


def business_calendar(
    context: dg.ScheduleEvaluationContext, db: Database, settings: Settings
) -> BusinessCalendar:
    """A schedule's calendar: with the database's local overrides; the package's alone if the
    database is unreachable (a run on a day off does no harm: there is simply nothing due)."""
    try:
        return calendar_of(db, settings)
    except StoreError as error:
        context.log.warning("holiday overrides unreadable, public holidays only: %s", error)
        return BusinessCalendar(settings.holiday_country, settings.holiday_subdivision)


def business_day_of(
    context: dg.ScheduleEvaluationContext, db: Database, settings: Settings
) -> date | dg.SkipReason:
    """The local day of a schedule's tick, or the reason to skip it (not a business day)."""
    scheduled = context.scheduled_execution_time
    assert scheduled is not None
    day = scheduled.astimezone(ZoneInfo(settings.timezone)).date()
    if not business_calendar(context, db, settings).is_business_day(day):
        return dg.SkipReason(f"{day} is not a business day")
    return day
