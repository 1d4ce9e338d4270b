"""The ``alerts`` sensor records a failed run with its fingerprint (real Postgres)."""

from __future__ import annotations

from typing import Any

import dagster as dg
import psycopg

from followup_pipeline.defs.alerts import alerts
from followup_pipeline.domain.alerts import fingerprint
from followup_pipeline.resources import PostgresResource


def _failed_run(instance: dg.DagsterInstance, vendor: str, deal: str) -> dg.ExecuteInProcessResult:
    @dg.op(name="boom")
    def boom() -> None:
        raise ValueError(f"{vendor}: HTTP 503 on deal {deal}")

    @dg.job(name="evaluate")
    def failing() -> None:
        boom()

    return failing.execute_in_process(instance=instance, raise_on_error=False)


def test_alerts_sensor_records_failures_under_one_fingerprint(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    with dg.instance_for_test() as instance:
        for vendor, deal in (
            ("espocrm", "6650a1b2c3d4e5f01"),
            ("espocrm", "7a50b1b2c3d4e5f99"),
            ("clickup", "6650a1b2c3d4e5f01"),
        ):
            result = _failed_run(instance, vendor, deal)
            assert not result.success
            with dg.build_run_status_sensor_context(
                sensor_name="alerts",
                dagster_instance=instance,
                dagster_run=result.dagster_run,
                dagster_event=result.get_run_failure_event(),
                resources={"postgres": PostgresResource(url=db_url)},
            ) as context:
                alerts(context.for_run_failure())
    rows = db.execute("SELECT fingerprint, job_name, run_id FROM alerts ORDER BY id").fetchall()
    assert len(rows) == 3
    # The same failure on two deals is one fingerprint; another vendor's is another.
    assert rows[0]["fingerprint"] == rows[1]["fingerprint"]
    assert rows[2]["fingerprint"] != rows[0]["fingerprint"]
    assert rows[0]["fingerprint"] == fingerprint(
        "evaluate", "ValueError", "espocrm: HTTP 503 on deal 6650a1b2c3d4e5f01"
    )
    assert rows[0]["run_id"] != rows[1]["run_id"]
