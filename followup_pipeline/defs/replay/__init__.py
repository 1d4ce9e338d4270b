"""Replay: re-process dead-lettered events or actions by their original names."""

import dagster as dg

from followup_pipeline.defs.common import RunCounts, outcome_output


class ReplayConfig(dg.Config):
    """Names as ``event:<id>`` or ``action:<key>``."""

    names: list[str]


@dg.op
def replay_dead_letters(
    context: dg.OpExecutionContext, config: ReplayConfig
) -> dg.Output[RunCounts]:
    """Replay the named dead letters (lands with the event-log issue)."""
    return outcome_output(context, "ok", {"requested": len(config.names)})


@dg.job(description="Re-process dead-lettered events or actions by their original id.")
def replay() -> None:
    replay_dead_letters()


definitions = dg.Definitions(jobs=[replay])
