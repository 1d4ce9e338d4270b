"""Replay: re-process dead-lettered events and actions by their original names.

Launched from the Launchpad with ``ops: {replay_dead_letters: {config: {names: [...]}}}``. Each
``event:<id>`` goes back to pending under its original id and is registered in this run, so the
items it finished before are skipped. Each ``action:<key>`` gets a fresh budget of attempts and is
carried out by the next ``evaluate`` run, which searches ClickUp for its key before any create.

The events are handled by their source's handler, found in the ``event_handlers`` resource (each
capability that consumes events offers its own), so this capability imports none of them.
"""

import dagster as dg

from followup_pipeline.engine.runs import RunCounts, outcome_output, time_limit
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.engine.worker import EventHandlers, EventWorker, WorkerRun, worker_outcome
from followup_pipeline.integrations.resources import (
    CompanyLookupResource,
    EspoCrmResource,
    MistralResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.dead_letters import parse_name, replay_actions, requeue_events


class ReplayConfig(dg.Config):
    """Names as ``event:<id>`` or ``action:<key>``."""

    names: list[str]
    #: Who replays (kept in the audit): the Launchpad has no login of its own to tell.
    by: str = "the Dagster UI"
    reason: str | None = None


@dg.op
def replay_dead_letters(
    context: dg.OpExecutionContext,
    config: ReplayConfig,
    settings: dg.ResourceParam[Settings],
    event_handlers: dg.ResourceParam[EventHandlers],
    postgres: PostgresResource,
    espocrm: EspoCrmResource,
    company_lookup: CompanyLookupResource,
    mistral: MistralResource,
    clock: ClockResource,
) -> dg.Output[RunCounts]:
    """Requeue the named events under their original ids and register them now."""
    try:
        names = [parse_name(text) for text in config.names]
    except ValueError as error:
        raise dg.Failure(description=str(error)) from None
    ids = [n.event_id for n in names if n.kind == "event"]
    keys = [n.value for n in names if n.kind == "action"]
    with postgres.connection() as conn:
        with conn.transaction():
            requeued, refused = requeue_events(conn, ids)
            for event_id in requeued:
                audit.record(conn, actor=config.by.strip() or "the Dagster UI",
                             action="dead_letter.replay", subject=f"event:{event_id}",
                             reason=config.reason)  # fmt: skip
        for event_id, why in refused.items():
            context.log.warning("event:%s not replayed: %s", event_id, why)
        vendors = {
            "espocrm": espocrm,
            "company_lookup": company_lookup,
            "mistral": mistral,
            "clock": clock,
        }
        scope = RunScope(clock.now(), context.run_id, context.log)
        handler = event_handlers.dispatcher(WorkerRun(conn, postgres, scope, settings, vendors))
        counts: RunCounts = dict(EventWorker(conn, handler, settings, sources=()).run(ids=requeued))
    with postgres.connection() as conn, conn.transaction():
        replayed, refused_actions = replay_actions(conn, keys)
        for key in replayed:
            audit.record(conn, actor=config.by.strip() or "the Dagster UI",
                         action="dead_letter.replay", subject=f"action:{key}",
                         reason=config.reason)  # fmt: skip
    for key, why in refused_actions.items():
        context.log.warning("action:%s not replayed: %s", key, why)
    refused_count = len(refused) + len(refused_actions)
    counts.update(
        requested=len(names),
        requeued=len(requeued),
        actions_replayed=len(replayed),
        refused=refused_count,
    )
    outcome = "partial" if refused_count else worker_outcome(counts)
    return outcome_output(context, outcome, counts)


@dg.job(
    description="Re-process dead-lettered events or actions by their original id.",
    tags=time_limit(30 * 60),
)
def replay() -> None:
    replay_dead_letters()


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``replay`` job, launched by an operator."""
    return dg.Definitions(jobs=[replay], resources={"settings": settings})
