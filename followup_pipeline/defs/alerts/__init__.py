"""Alerts: a run-failure sensor over every job records the failure with its fingerprint
(sending the alerts is not built yet)."""

from datetime import UTC, datetime

import dagster as dg

from followup_pipeline.domain.alerts import fingerprint
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store.alerts import record_run_failure


@dg.run_failure_sensor(
    monitor_all_code_locations=True,
    name="alerts",
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def alerts(context: dg.RunFailureSensorContext, postgres: PostgresResource) -> None:
    """Record every failed run with its fingerprint: the job, the error's type and its message
    with numbers and ids normalised (``domain/alerts.py``), so repeats of one failure match."""
    run = context.dagster_run
    message = context.failure_event.message or "run failed"
    error_type, detail = _first_error(context.instance, run.run_id, message)
    with postgres.connection() as conn:
        record_run_failure(
            conn,
            fingerprint=fingerprint(run.job_name, error_type, detail),
            job_name=run.job_name,
            run_id=run.run_id,
            message=message,
            occurred_at=datetime.now(UTC),
        )


def _first_error(instance: dg.DagsterInstance, run_id: str, fallback: str) -> tuple[str, str]:
    """The type and message of the run's first failed step's own error (under Dagster's
    wrapper); the run's failure message when no step failed (a run that never started)."""
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    event = records[0].dagster_event if records else None
    error = getattr(event.event_specific_data, "error", None) if event else None
    while error is not None and error.cause is not None and error.cls_name.startswith("Dagster"):
        error = error.cause
    if error is None:
        return "RunFailure", fallback
    kind = str(error.cls_name)
    return kind, str(error.message).strip().removeprefix(f"{kind}: ")


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``alerts`` sensor (it needs no settings yet)."""
    return dg.Definitions(sensors=[alerts])
