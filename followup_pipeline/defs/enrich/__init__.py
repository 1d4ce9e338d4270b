"""Enrichment: a checked two-line summary of each open deal whose e-mails changed, hourly at :30
every day (``summariser.py``), and the ``review`` job that settles what the check refused.
"""

from typing import Literal

import dagster as dg

from followup_pipeline.defs.enrich.summariser import Summariser
from followup_pipeline.engine.runs import (
    SINGLETON_TAG,
    RunCounts,
    outcome_output,
    skipped_output,
    time_limit,
)
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.resources import EspoCrmResource, MistralResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.review import ReviewError, decide

#: A hung run is failed after this many seconds (run monitoring, dagster.yaml).
MAX_RUNTIME_S = 50 * 60
#: Settling one review item (for a lead, its next steps too) takes seconds.
REVIEW_MAX_RUNTIME_S = 10 * 60


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
    return outcome_output(
        context,
        "partial" if tally.problems else "ok",
        tally.metadata(),
        degraded=tally.degraded(),
    )


@dg.job(
    description="Summarise each open deal's new e-mails in two checked lines.",
    tags={SINGLETON_TAG: "enrich", **time_limit(MAX_RUNTIME_S)},
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


@dg.job(
    description="Accept or reject a review item (Launchpad: ops.settle_review_item).",
    tags=time_limit(REVIEW_MAX_RUNTIME_S),
)
def review() -> None:
    settle_review_item()


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``enrich`` job and its schedule (in the team's time zone), and the ``review`` job."""

    # Every day: an e-mail answered on a Saturday is summarised before Monday's first list.
    enrich_hourly = dg.ScheduleDefinition(
        name="enrich_hourly",
        job=enrich,
        cron_schedule="30 * * * *",
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Every hour at :30, every day.",
    )

    return dg.Definitions(
        jobs=[enrich, review], schedules=[enrich_hourly], resources={"settings": settings}
    )
