"""Registration: the ``crm_events`` sensor over the event log and the ``register`` job."""

import dagster as dg

from followup_pipeline.defs.common import RunCounts, outcome_output
from followup_pipeline.resources import PostgresResource

PENDING_EVENTS = """
SELECT count(*) AS n FROM events WHERE status = 'pending' AND next_attempt_at <= now()
"""


@dg.op
def register_events(
    context: dg.OpExecutionContext, postgres: PostgresResource
) -> dg.Output[RunCounts]:
    """Claim pending events and open or close watches (the claiming lands with the ingress)."""
    with postgres.connection() as conn:
        row = conn.execute(PENDING_EVENTS).fetchone()
    pending = int(row["n"]) if row else 0
    return outcome_output(context, "ok", {"pending_events": pending})


@dg.job(description="Open and close watches from the CRM's webhook events.")
def register() -> None:
    register_events()


@dg.sensor(job=register, minimum_interval_seconds=30)
def crm_events(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    """Launches ``register`` when events are due (wired to the event log with the ingress)."""
    return dg.SkipReason("the event log sensor is not wired yet")


definitions = dg.Definitions(jobs=[register], sensors=[crm_events])
