"""Two-line summaries of deals (``enrichments``)."""

from __future__ import annotations

from typing import Any

import psycopg

from followup_pipeline.store.queries import query
from followup_pipeline.store.watches import SUBJECT_TYPE


def latest_summary(conn: psycopg.Connection[Any], subject_id: str) -> tuple[str, str] | None:
    """The newest two-line summary of a deal."""
    row = conn.execute(
        query("latest_summary"), {"subject_type": SUBJECT_TYPE, "subject_id": subject_id}
    ).fetchone()
    return (row["line1"], row["line2"]) if row else None
