"""The sensor tick every pipeline that consumes the event log uses: launch its job when events
of its sources are due and fewer than ``max_in_flight`` runs of it are in flight.

With one run allowed (``lead_intake``), a run is launched only when none is queued or running.
With more (``register``), a run beside those in flight is launched only for a backlog: more due
events than one batch for each run in flight. Runs in flight come back for the next batch
themselves, so a run more for a few events would only cost a process; claims use
``SKIP LOCKED`` leases, so runs side by side never take the same event.

Run keys: Dagster keeps a run key for as long as its run exists, failed runs included
(docs/dagster.md), so a key made only from the events would block their retry. The key counts the
sensor's launches (its cursor) and names the due events' ids and attempts, so two runs launched
side by side over the same due events still get distinct keys.
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
    max_in_flight: int = 1,
) -> dg.SensorResult | dg.SkipReason:
    """Launch ``job_name`` when events of ``sources`` are due and fewer than ``max_in_flight``
    runs of it are in flight; beside runs in flight, only when more events are due than one
    batch (``limit``) for each of them."""
    in_flight = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=job_name, statuses=IN_FLIGHT), limit=max_in_flight
    )
    if len(in_flight) >= max_in_flight:
        if max_in_flight == 1:
            return dg.SkipReason(f"{job_name} run {in_flight[0].run_id} is still in flight")
        return dg.SkipReason(f"{len(in_flight)} {job_name} runs are in flight, the most allowed")
    # What the runs in flight take in their next batches; one event more is a backlog. So the
    # query reads at most one row more than that, however long the backlog is.
    taken = len(in_flight) * limit
    with db.connection() as conn:
        due = due_events(conn, limit=max(limit, taken + 1), sources=sources)
    if not due:
        return dg.SkipReason("no events due")
    if len(due) <= taken:
        runs = f"{len(in_flight)} {job_name} run{'s' if len(in_flight) > 1 else ''}"
        return dg.SkipReason(f"{runs} in flight will take the {len(due)} events due")
    due = due[:limit]
    launches = int(context.cursor or 0) + 1
    names = ",".join(f"{event.id}:{event.attempts}" for event in due)
    digest = hashlib.sha256(names.encode()).hexdigest()[:12]
    request = dg.RunRequest(
        run_key=f"{job_name}-{launches}-{digest}", tags={EVENTS_TAG: str(len(due))}
    )
    return dg.SensorResult(run_requests=[request], cursor=str(launches))
