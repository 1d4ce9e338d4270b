"""Operator control from the Launchpad: pause or resume a watch."""

from typing import Literal

import dagster as dg

from followup_pipeline.engine.runs import RunCounts, calendar_of, outcome_output, time_limit
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.watch_control import WatchControlError, pause_watch, resume_watch
from followup_pipeline.store.watches import watch_by_id


class WatchControlConfig(dg.Config):
    """Which watch, and what to do with it."""

    watch_id: int
    action: Literal["pause", "resume"]
    #: Who does it (kept in the audit): the Launchpad has no login of its own to tell.
    by: str = "the Dagster UI"
    reason: str | None = None


@dg.op
def control_watch(
    context: dg.OpExecutionContext,
    config: WatchControlConfig,
    settings: dg.ResourceParam[Settings],
    postgres: PostgresResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Pause or resume the watch; an unknown or closed watch fails the run with the reason."""
    calendar = calendar_of(postgres, settings) if config.action == "resume" else None
    with postgres.connection() as conn, conn.transaction():
        try:
            if calendar is None:
                pause_watch(conn, watch_id=config.watch_id, now=clock.now())
                planned = 0
            else:
                resumed = resume_watch(
                    conn, watch_id=config.watch_id, now=clock.now(), calendar=calendar
                )
                planned = len(resumed)
        except WatchControlError as error:
            raise dg.Failure(description=str(error)) from error
        watch = watch_by_id(conn, config.watch_id)
        audit.record(
            conn,
            actor=config.by.strip() or "the Dagster UI",
            action=f"watch.{config.action}",
            subject=f"deal:{watch.subject_id}" if watch else f"watch:{config.watch_id}",
            detail=f"watch {config.watch_id}: {config.action} from the Launchpad (run "
            f"{context.run_id})",
            reason=config.reason,
        )
    counts = {"watch_id": config.watch_id, "action": config.action, "steps_planned": planned}
    return outcome_output(context, "ok", counts)


#: Pausing or resuming one watch takes seconds.
MAX_RUNTIME_S = 10 * 60


@dg.job(
    description="Pause or resume a watch (config: watch_id, action).",
    tags=time_limit(MAX_RUNTIME_S),
)
def watch_control() -> None:
    control_watch()


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``watch_control`` job, launched by an operator."""
    return dg.Definitions(jobs=[watch_control], resources={"settings": settings})
