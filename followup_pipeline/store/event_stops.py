"""The event log's record of a run stopped by an error of the database itself
(``engine/run_stops.py``): the stopping event's attempt given back and its stops counted, a dead
letter after too many in a row, and the events of the batch the run had not started freed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from followup_pipeline.store.db import require_transaction
from followup_pipeline.store.queries import query


def give_back(
    conn: psycopg.Connection[Any], *, event_id: int, run: str, step: str, error: str
) -> int | None:
    """Give back the attempt charged to event ``event_id`` when its handling started, count one
    more run it stopped and keep ``error``; its lease is kept. The runs it stopped in a row, or
    None when it is no longer the claim of ``run`` (call inside a transaction)."""
    require_transaction(conn, "give_back")
    params = {"id": event_id, "run": run, "step": step, "error": error}
    row = conn.execute(query("events_run_stop"), params).fetchone()
    return None if row is None else int(row["run_stops"])


def bury(conn: psycopg.Connection[Any], *, event_id: int, step: str, error: str) -> None:
    """Make event ``event_id`` a dead letter at ``step`` with ``error``, its lease freed."""
    conn.execute(query("events_mark_dead"), {"id": event_id, "step": step, "error": error})


def release(conn: psycopg.Connection[Any], ids: Sequence[int], *, run: str) -> None:
    """Free the events of ``ids`` that ``run`` claimed and did not start, for the next run to
    take at once rather than after their leases."""
    if ids:
        conn.execute(query("events_release"), {"ids": list(ids), "run": run})
