"""Failed runs kept for the alerting (``alerts``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.store.queries import query


def record_run_failure(
    conn: psycopg.Connection[Any],
    *,
    fingerprint: str,
    job_name: str,
    run_id: str,
    message: str,
    occurred_at: datetime,
) -> None:
    """Keep a failed run once (a second record of the same run changes nothing)."""
    conn.execute(
        query("record_run_failure"),
        {
            "fingerprint": fingerprint,
            "job_name": job_name,
            "run_id": run_id,
            "message": message,
            "occurred_at": occurred_at,
        },
    )
