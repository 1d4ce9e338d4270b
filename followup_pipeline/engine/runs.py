"""What a Dagster run of any pipeline reports, and when a schedule's tick is a business day.

A run's outcome is the tag ``followup/outcome`` (``ok``, ``partial``, ``skipped``); its business
counts are the op's output and metadata, and the non-zero ones a short tag for lists of runs. A
``partial`` run says what it skipped and why in ``followup/degraded`` (by vendor, with the first
error). A run that ended clean is a SUCCESS with the outcome ``ok``: ``last_clean_run`` is the one
answer to "when did this job last work", and ``recent_outcomes`` what its latest runs ended with
(the degraded-run alert, ``defs/alerts/degraded.py``).
"""

from dataclasses import dataclass
from datetime import UTC, date, datetime
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
#: What a ``partial`` run skipped, by vendor, with the first error (``Tally.degraded``).
DEGRADED_TAG = "followup/degraded"
DEGRADED_TAG_MAX = 500
#: The machine's clock when the run read its world (ISO 8601): what people read of it (a
#: simulated clock's, not Dagster's wall clock).
AT_TAG = "followup/at"
#: How much of the CRM an ``evaluate`` run read: ``full``, ``partial`` (the stages checked, a
#: listing or the activity not read), or ``down`` (not even the stages): the operations line.
CRM_TAG = "followup/crm"
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
    context: dg.OpExecutionContext,
    outcome: Outcome,
    counts: RunCounts,
    *,
    degraded: str | None = None,
    at: datetime | None = None,
    extra_tags: dict[str, str] | None = None,
) -> dg.Output[RunCounts]:
    """Tag the run with its outcome (and, when ``partial``, with what it skipped and why; with
    ``at``, the machine's clock of its reading) and return the counts as the op's output, with
    metadata."""
    line = counts_line(counts)
    tags = {OUTCOME_TAG: outcome, **({COUNTS_TAG: line} if line else {})}
    if at is not None:
        tags[AT_TAG] = at.isoformat()
    tags.update(extra_tags or {})
    if outcome == "partial" and degraded:
        tags[DEGRADED_TAG] = cut(degraded, DEGRADED_TAG_MAX)
    context.instance.add_run_tags(context.run_id, tags)
    context.log.info("outcome %s: %s", outcome, dict(counts))
    if DEGRADED_TAG in tags:
        context.log.warning("degraded: %s", tags[DEGRADED_TAG])
    metadata = {"outcome": outcome, **counts}
    if DEGRADED_TAG in tags:
        metadata["degraded"] = tags[DEGRADED_TAG]
    return dg.Output(dict(counts), metadata=metadata)


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis ending a cut one."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
    return cut(" ".join(words), COUNTS_TAG_MAX)


@dataclass(frozen=True)
class Ended:
    """A run of a job that ended SUCCESS: its id, outcome, what it skipped, and its start and
    end (Dagster's clock)."""

    run_id: str
    outcome: str
    degraded: str | None
    started: datetime
    ended: datetime
    #: The machine's clock of its reading (``AT_TAG``; else its start).
    at: datetime | None = None
    #: How much of the CRM it read (``CRM_TAG``; None: not said, a run before the tag).
    crm: str | None = None


def ended_of(record: dg.RunRecord) -> Ended:
    run = record.dagster_run
    start = record.start_time or record.create_timestamp.timestamp()
    end = record.end_time or record.update_timestamp.timestamp()
    started = datetime.fromtimestamp(start, tz=UTC)
    try:
        at = datetime.fromisoformat(run.tags[AT_TAG])
    except (KeyError, ValueError):
        at = started
    return Ended(
        run_id=run.run_id,
        outcome=run.tags.get(OUTCOME_TAG, "ok"),
        degraded=run.tags.get(DEGRADED_TAG),
        started=started,
        ended=datetime.fromtimestamp(end, tz=UTC),
        at=at,
        crm=run.tags.get(CRM_TAG),
    )


def last_clean_run(instance: dg.DagsterInstance, job_name: str) -> Ended | None:
    """The latest run of ``job_name`` that ended clean: SUCCESS with the outcome ``ok`` (a
    ``partial`` run is a green SUCCESS in the UI, and skipped work; a ``skipped`` one did
    nothing). Every check that asks whether a job works asks this."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(
            job_name=job_name, statuses=[dg.DagsterRunStatus.SUCCESS], tags={OUTCOME_TAG: "ok"}
        ),
        limit=1,
        order_by="update_timestamp",
        ascending=False,
    )
    return ended_of(records[0]) if records else None


def recent_outcomes(instance: dg.DagsterInstance, job_name: str, *, limit: int) -> list[Ended]:
    """The latest runs of ``job_name`` that ended SUCCESS with ``ok`` or ``partial``, newest
    first (``skipped`` runs did nothing; a failed run is alerted as one)."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(
            job_name=job_name,
            statuses=[dg.DagsterRunStatus.SUCCESS],
            tags={OUTCOME_TAG: ["ok", "partial"]},
        ),
        limit=limit,
        order_by="update_timestamp",
        ascending=False,
    )
    return [ended_of(record) for record in records]


def jobs_degraded_since(instance: dg.DagsterInstance, since: datetime) -> set[str]:
    """The jobs with a ``partial`` run updated since ``since`` that skipped work for a vendor
    (its ``followup/degraded`` tag; an event worker's ``partial``, events retried, is not one:
    its events raise their own alerts)."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={OUTCOME_TAG: "partial"}, updated_after=since), limit=1000
    )
    return {r.dagster_run.job_name for r in records if DEGRADED_TAG in r.dagster_run.tags}


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
