"""The sensor tick every pipeline that consumes the event log uses: launch its job when events
of its sources are due and no run of it is in flight.

Run keys: Dagster keeps a run key for as long as its run exists, failed runs included
(docs/dagster.md), so a key made only from the events would block their retry. The key counts the
sensor's launches (its cursor) and names the due events' ids and attempts; a second run is never
launched while one is queued or running, and claims use ``SKIP LOCKED`` whatever happens.
"""

import hashlib
from collections.abc import Sequence

import dagster as dg

from followup_pipeline.engine.scope import Database
from followup_pipeline.store.events import due_events

#: A run tag: how many events were due when the sensor launched the run.
EVENTS_TAG = "followup/events"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def events_tick(
    context: dg.SensorEvaluationContext,
    db: Database,
    *,
    job_name: str,
    sources: Sequence[str],
    limit: int,
) -> dg.SensorResult | dg.SkipReason:
    """Launch ``job_name`` when events of ``sources`` are due and no run of it is in flight."""
    in_flight = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=job_name, statuses=IN_FLIGHT), limit=1
    )
    if in_flight:
        return dg.SkipReason(f"{job_name} run {in_flight[0].run_id} is still in flight")
    with db.connection() as conn:
        due = due_events(conn, limit=limit, sources=sources)
    if not due:
        return dg.SkipReason("no events due")
    launches = int(context.cursor or 0) + 1
    names = ",".join(f"{event.id}:{event.attempts}" for event in due)
    digest = hashlib.sha256(names.encode()).hexdigest()[:12]
    request = dg.RunRequest(
        run_key=f"{job_name}-{launches}-{digest}", tags={EVENTS_TAG: str(len(due))}
    )
    return dg.SensorResult(run_requests=[request], cursor=str(launches))
