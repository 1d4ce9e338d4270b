"""Operator control from the Launchpad: pause or resume a watch."""

from typing import Literal

import dagster as dg

from followup_pipeline.defs.common import RunCounts, outcome_output
from followup_pipeline.resources import ClockResource, PostgresResource, SettingsResource
from followup_pipeline.store.watch_control import WatchControlError, pause_watch, resume_watch
from followup_pipeline.store.watches import load_calendar


class WatchControlConfig(dg.Config):
    """Which watch, and what to do with it."""

    watch_id: int
    action: Literal["pause", "resume"]


@dg.op
def control_watch(
    context: dg.OpExecutionContext,
    config: WatchControlConfig,
    postgres: PostgresResource,
    clock: ClockResource,
    settings: SettingsResource,
) -> dg.Output[RunCounts]:
    """Pause or resume the watch; an unknown or closed watch fails the run with the reason."""
    s = settings.get()
    with postgres.connection() as conn:
        try:
            if config.action == "pause":
                pause_watch(conn, watch_id=config.watch_id, now=clock.now())
                planned = 0
            else:
                calendar = load_calendar(conn, s.holiday_country, s.holiday_subdivision)
                planned = len(
                    resume_watch(conn, watch_id=config.watch_id, now=clock.now(), calendar=calendar)
                )
        except WatchControlError as error:
            raise dg.Failure(description=str(error)) from error
    counts = {"watch_id": config.watch_id, "action": config.action, "steps_planned": planned}
    return outcome_output(context, "ok", counts)


@dg.job(description="Pause or resume a watch (config: watch_id, action).")
def watch_control() -> None:
    control_watch()


definitions = dg.Definitions(jobs=[watch_control])
