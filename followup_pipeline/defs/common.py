"""What every job shares: the outcome tag, business counts reported as run metadata, the
business day of a schedule's tick, and attempts at ledger actions (task ledger and mailer)."""

from contextlib import AbstractContextManager
from datetime import date, datetime
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo

import dagster as dg
import psycopg

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.decisions import StagePolicy
from followup_pipeline.integrations.espocrm_models import Deal
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import ledger
from followup_pipeline.store.db import StoreError
from followup_pipeline.store.holidays import load_calendar
from followup_pipeline.store.ledger import ActionSpec, Attempt, FinalOutcome
from followup_pipeline.store.watches import Subject

OUTCOME_TAG = "followup/outcome"
#: The run's business counts in one short line (``opened=2 fired=3``), for lists of runs.
COUNTS_TAG = "followup/counts"
COUNTS_TAG_MAX = 200
SINGLETON_TAG = "followup/singleton"

Outcome = Literal["ok", "partial", "skipped"]
#: Business counts of a run (registered, closed by reason, fired, ...), shown as run metadata.
RunCounts = dict[str, Any]


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


def counts_line(counts: RunCounts) -> str:
    """The non-zero numbers of ``counts`` as ``name=value`` words, cut to a tag's length."""
    words = [
        f"{name}={value}"
        for name, value in counts.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and value
    ]
    line = " ".join(words)
    return line if len(line) <= COUNTS_TAG_MAX else line[: COUNTS_TAG_MAX - 1] + "…"


def stage_policy(settings: Settings) -> StagePolicy:
    """The configured watched, won and lost stages."""
    return StagePolicy(settings.watched_stages, settings.won_stage, settings.lost_stage)


def subject_of(deal: Deal, settings: Settings) -> Subject:
    """What a watch copies from a CRM deal (its names as the CRM has them now)."""
    return Subject(
        subject_id=deal.id,
        name=deal.name,
        stage=deal.stage,
        account_name=deal.account_name,
        assigned_user_id=deal.assigned_user_id,
        assigned_user_name=deal.assigned_user_name,
        crm_url=settings.crm_deal_url(deal.id),
    )


def calendar_of(postgres: PostgresResource, settings: Settings) -> BusinessCalendar:
    """The business calendar: public holidays and the database's local overrides."""
    with postgres.connection() as conn:
        return load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)


def business_calendar(
    context: dg.ScheduleEvaluationContext, postgres: PostgresResource, settings: Settings
) -> BusinessCalendar:
    """A schedule's calendar: with the database's local overrides; the package's alone if the
    database is unreachable (a run on a day off does no harm: there is simply nothing due)."""
    try:
        return calendar_of(postgres, settings)
    except StoreError as error:
        context.log.warning("holiday overrides unreadable, public holidays only: %s", error)
        return BusinessCalendar(settings.holiday_country, settings.holiday_subdivision)


def business_day_of(
    context: dg.ScheduleEvaluationContext, postgres: PostgresResource, settings: Settings
) -> date | dg.SkipReason:
    """The local day of a schedule's tick, or the reason to skip it (not a business day)."""
    scheduled = context.scheduled_execution_time
    assert scheduled is not None
    day = scheduled.astimezone(ZoneInfo(settings.timezone)).date()
    if not business_calendar(context, postgres, settings).is_business_day(day):
        return dg.SkipReason(f"{day} is not a business day")
    return day


class Connections(Protocol):
    """Pooled connections that commit on success and roll back on error."""

    def connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection for one unit of work."""
        ...


class Attempts:
    """Begin and finish attempts at ``now`` for run ``run_id`` (a base class: it needs ``db``,
    ``now`` and ``run_id``)."""

    db: Connections
    now: datetime
    run_id: str | None

    def _begin(self, spec: ActionSpec) -> Attempt | None:
        """Mark the action attempted (committed before the provider is called); None if it
        reached the provider already."""
        with self.db.connection() as conn, conn.transaction():
            return ledger.begin_attempt(conn, spec, started_at=self.now, run_id=self.run_id)

    def _finish(
        self,
        attempt: Attempt,
        outcome: FinalOutcome,
        *,
        provider_ref: str | None = None,
        error: str | None = None,
    ) -> None:
        """Record how an attempt ended, on the attempt and on the action."""
        with self.db.connection() as conn, conn.transaction():
            ledger.finish_attempt(
                conn,
                attempt,
                outcome=outcome,
                finished_at=self.now,
                provider_ref=provider_ref,
                error=error,
            )
