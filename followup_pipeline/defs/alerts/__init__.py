"""Alerts: a run-failure sensor over every job records the failure (sending lands later)."""

from datetime import UTC, datetime

import dagster as dg

from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store.alerts import record_run_failure


@dg.run_failure_sensor(
    monitor_all_code_locations=True,
    name="alerts",
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def alerts(context: dg.RunFailureSensorContext, postgres: PostgresResource) -> None:
    """Record every failed run; the fingerprint is the job and the first line of the error."""
    run = context.dagster_run
    message = context.failure_event.message or "run failed"
    fingerprint = f"{run.job_name}:{message.splitlines()[0][:200]}"
    with postgres.connection() as conn:
        record_run_failure(
            conn,
            fingerprint=fingerprint,
            job_name=run.job_name,
            run_id=run.run_id,
            message=message,
            occurred_at=datetime.now(UTC),
        )


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``alerts`` sensor (it needs no settings yet)."""
    return dg.Definitions(sensors=[alerts])
