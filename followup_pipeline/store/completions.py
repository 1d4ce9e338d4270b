"""Tasks completed in ClickUp as the salesperson's follow-up (``task_completions``): which steps
the completed tasks belong to, and the evidence of each completion, recorded once.

The table is the evidence the design asks for when a completion resets a cadence: ClickUp holds
nothing the machine relies on, so what was read there (the task, its status, when it was
completed) is kept here, with when and by which run it was read (docs/architecture.md §5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.store.db import fetch_all, storable
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class CompletedStep:
    """A step of an open watch whose task someone completed in ClickUp: not overtaken, not
    closed by Followup, its completion not recorded yet. ``subject_id`` names the deal whose
    activity it is."""

    task_id: str
    watch_id: int
    step_no: int
    subject_id: str


@dataclass(frozen=True)
class Completion:
    """One completion as read from ClickUp: the task, its step, the status it was completed
    into and when; ``counted`` when it came after the watch's last reset (new activity)."""

    task_id: str
    watch_id: int
    step_no: int
    status: str
    completed_at: datetime
    counted: bool


@dataclass(frozen=True)
class RecordedCompletion:
    """A row of ``task_completions``."""

    id: int
    task_id: str
    watch_id: int
    step_no: int
    status: str
    completed_at: datetime
    read_at: datetime
    run_id: str | None
    counted: bool


def steps_of_completed_tasks(
    conn: psycopg.Connection[Any], task_ids: Sequence[str]
) -> list[CompletedStep]:
    """The steps of open watches whose tasks are among ``task_ids`` (completed in ClickUp) and
    count as the salesperson's follow-up: Followup did not close them (no closing action in
    any state), activity did not overtake them, and no completion of theirs is recorded."""
    if not task_ids:
        return []
    params = {"task_ids": list(task_ids)}
    return fetch_all(conn, CompletedStep, query("steps_of_completed_tasks"), params)


def record_completions(
    conn: psycopg.Connection[Any],
    completions: Sequence[Completion],
    *,
    read_at: datetime,
    run_id: str | None,
) -> set[str]:
    """Record ``completions`` (one statement), each task at most once: the ids recorded now (a
    task recorded before is left as it was). Call it in the transaction that applies them, so
    that a completion is recorded exactly when its reset lands."""
    if not completions:
        return set()
    params = {
        "task_ids": [c.task_id for c in completions],
        "watch_ids": [c.watch_id for c in completions],
        "step_nos": [c.step_no for c in completions],
        "statuses": [storable(c.status, 255) for c in completions],
        "completed_ats": [c.completed_at for c in completions],
        "counted": [c.counted for c in completions],
        "read_at": read_at,
        "run_id": run_id,
    }
    rows = conn.execute(query("record_task_completions"), params).fetchall()
    return {str(row["task_id"]) for row in rows}


def completions_of(conn: psycopg.Connection[Any], watch_id: int) -> list[RecordedCompletion]:
    """The completions recorded for a watch's tasks, oldest first (for the operator and tests)."""
    return fetch_all(
        conn, RecordedCompletion, query("task_completions_of_watch"), {"watch_id": watch_id}
    )
