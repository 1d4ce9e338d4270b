"""Enrichment: a checked two-line summary of each open deal whose e-mails changed, hourly at :30
on business days (``summariser.py``), and the ``review`` job that settles what the check refused.
"""

from typing import Literal

import dagster as dg

from followup_pipeline.defs.enrich.summariser import Summariser
from followup_pipeline.engine.runs import (
    SINGLETON_TAG,
    RunCounts,
    business_day_of,
    outcome_output,
    skipped_output,
)
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.resources import EspoCrmResource, MistralResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.review import ReviewError, decide

#: A hung run is failed after this many seconds (run monitoring, dagster.yaml).
MAX_RUNTIME_S = 50 * 60


class ReviewConfig(dg.Config):
    """Settle one review item: ``accept`` (optionally with corrected lines, or a lead's corrected
    lead.v2 ``answer``) or ``reject`` (a lead's with a ``reason``)."""

    item_id: int
    action: Literal["accept", "reject"]
    line1: str | None = None
    line2: str | None = None
    answer: str | None = None
    reason: str | None = None
    #: Who decides (kept in the audit): the Launchpad has no login of its own to tell.
    by: str = "the Dagster UI"


@dg.op
def summarise_new_emails(
    context: dg.OpExecutionContext,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    espocrm: EspoCrmResource,
    mistral: MistralResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Queue the deals whose e-mails changed, then summarise them within the budget."""
    if not settings.enrich_enabled:
        return skipped_output(context, "FOLLOWUP_ENRICH_ENABLED=false: no model call")
    run = RunScope(clock.now(), context.run_id, context.log)
    summariser = Summariser(run, postgres, espocrm.get_client(), mistral.get_client(), settings)
    tally = summariser.run()
    tally.counts.update(summariser.tokens)
    return outcome_output(context, "partial" if tally.problems else "ok", tally.metadata())


@dg.job(
    description="Summarise each open deal's new e-mails in two checked lines.",
    tags={SINGLETON_TAG: "enrich", "dagster/max_runtime": str(MAX_RUNTIME_S)},
)
def enrich() -> None:
    summarise_new_emails()


@dg.op
def settle_review_item(
    context: dg.OpExecutionContext,
    config: ReviewConfig,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Accept or reject one review item, as ``followup review accept|reject`` does."""
    given = config.line1 is not None or config.line2 is not None
    lines = (config.line1, config.line2) if given else None
    try:
        with postgres.connection() as conn, conn.transaction():
            said = decide(
                conn,
                config.item_id,
                action=config.action,
                lines=lines,
                max_chars=settings.enrich_line_max_chars,
                now=clock.now(),
                answer=config.answer,
                reason=config.reason,
            )
            audit.record(
                conn,
                actor=config.by.strip() or "the Dagster UI",
                action=f"review.{config.action}",
                subject=f"review:{config.item_id}",
                detail=said,
                reason=config.reason,
            )
    except ReviewError as error:
        raise dg.Failure(description=str(error)) from None
    context.log.info(said)
    return outcome_output(context, "ok", {"item": config.item_id, config.action: 1})


@dg.job(description="Accept or reject a review item (Launchpad: ops.settle_review_item).")
def review() -> None:
    settle_review_item()


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``enrich`` job and its schedule (in the team's time zone), and the ``review`` job."""

    @dg.schedule(
        job=enrich,
        cron_schedule="30 * * * 1-5",
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    def enrich_hourly(
        context: dg.ScheduleEvaluationContext, postgres: PostgresResource
    ) -> dg.RunRequest | dg.SkipReason:
        """Every hour at :30 on business days (weekends and holidays are skipped)."""
        day = business_day_of(context, postgres, settings)
        return day if isinstance(day, dg.SkipReason) else dg.RunRequest()

    return dg.Definitions(
        jobs=[enrich, review], schedules=[enrich_hourly], resources={"settings": settings}
    )
