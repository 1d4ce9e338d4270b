"""Replay: re-process dead-lettered events (and, later, actions) by their original names.

Launched from the Launchpad with ``ops: {replay_dead_letters: {config: {names: [...]}}}``. Each
``event:<id>`` goes back to pending under its original id and is registered in this run, so the
items it finished before are skipped. ``action:<key>`` is not replayable yet (issue 5).
"""

import dagster as dg

from followup_pipeline.defs.common import RunCounts, outcome_output
from followup_pipeline.defs.register import outcome_of
from followup_pipeline.defs.register.registrar import Registrar
from followup_pipeline.integrations.resources import EspoCrmResource
from followup_pipeline.resources import PostgresResource, SettingsResource
from followup_pipeline.store.dead_letters import parse_name, requeue_events

ACTIONS_NOT_SUPPORTED = "replaying actions is not yet supported (the action ledger lands next)"


class ReplayConfig(dg.Config):
    """Names as ``event:<id>`` or ``action:<key>``."""

    names: list[str]


@dg.op
def replay_dead_letters(
    context: dg.OpExecutionContext,
    config: ReplayConfig,
    postgres: PostgresResource,
    espocrm: EspoCrmResource,
    settings: SettingsResource,
) -> dg.Output[RunCounts]:
    """Requeue the named events under their original ids and register them now."""
    try:
        names = [parse_name(text) for text in config.names]
    except ValueError as error:
        raise dg.Failure(description=str(error)) from None
    actions = [str(n) for n in names if n.kind == "action"]
    if actions:
        raise dg.Failure(description=f"{ACTIONS_NOT_SUPPORTED}: {', '.join(actions)}")
    ids = [n.event_id for n in names]
    with postgres.connection() as conn:
        requeued, refused = requeue_events(conn, ids)
        for event_id, why in refused.items():
            context.log.warning("event:%s not replayed: %s", event_id, why)
        counts: RunCounts = dict(Registrar(conn, espocrm, settings.get()).run(ids=requeued))
    counts.update(requested=len(ids), requeued=len(requeued), refused=len(refused))
    outcome = "partial" if refused else outcome_of(counts)
    return outcome_output(context, outcome, counts)


@dg.job(description="Re-process dead-lettered events or actions by their original id.")
def replay() -> None:
    replay_dead_letters()


definitions = dg.Definitions(jobs=[replay])
