"""Steps of watches (``watch_steps``): planned, fired with a task, skipped with a reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import psycopg

from followup_pipeline.domain.cadence import PlannedStep
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.steps import StepState
from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class Step:
    """A row of ``watch_steps``."""

    id: int
    watch_id: int
    step_no: int
    offset_days: int
    due_on: date
    fired_at: datetime | None
    task_ref: str | None
    skipped_at: datetime | None
    skip_reason: str | None

    @property
    def open(self) -> bool:
        """Neither fired nor skipped."""
        return self.fired_at is None and self.skipped_at is None

    def planned(self) -> PlannedStep:
        """The step as the cadence plans it."""
        return PlannedStep(self.step_no, self.offset_days, self.due_on)

    def state(self, zone: str) -> StepState:
        """The step as the domain sees it (its firing date local to ``zone``)."""
        return StepState(
            step_no=self.step_no,
            offset_days=self.offset_days,
            due_on=self.due_on,
            fired_on=local_date(self.fired_at, zone) if self.fired_at else None,
            skipped=self.skipped_at is not None,
        )


@dataclass(frozen=True)
class TaskToClose:
    """A fired task of a closed watch that was not closed in ClickUp yet."""

    watch_id: int
    closed_reason: str
    closed_at: datetime
    time_zone: str
    step_no: int
    task_ref: str


@dataclass(frozen=True)
class OpenStep:
    """A step left open on a closed watch."""

    watch_id: int
    step_no: int
    due_on: date


def step_states(steps: Sequence[Step], zone: str) -> list[StepState]:
    """Steps as the domain sees them."""
    return [step.state(zone) for step in steps]


def steps_of(conn: psycopg.Connection[Any], watch_id: int) -> list[Step]:
    """Every step of a watch, in order."""
    return fetch_all(conn, Step, query("steps_of_watch"), {"watch_id": watch_id})


def fire_step(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, task_ref: str, at: datetime
) -> bool:
    """Mark a step fired with its task; False if it was not open."""
    params = {"watch_id": watch_id, "step_no": step_no, "task_ref": task_ref, "fired_at": at}
    return conn.execute(query("fire_step"), params).fetchone() is not None


def skip_step(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, reason: str, at: datetime
) -> bool:
    """Mark a step skipped for ``reason``; False if it was not open."""
    params = {"watch_id": watch_id, "step_no": step_no, "reason": reason, "skipped_at": at}
    return conn.execute(query("skip_step"), params).fetchone() is not None


def replan_step(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, due_on: date
) -> None:
    """Plan an unfired step again for ``due_on``."""
    conn.execute(query("replan_step"), {"watch_id": watch_id, "step_no": step_no, "due_on": due_on})


def open_steps_of_closed_watches(conn: psycopg.Connection[Any]) -> list[OpenStep]:
    """Steps left open on closed watches (their skip had to wait), oldest first."""
    return fetch_all(conn, OpenStep, query("open_steps_of_closed_watches"))


def tasks_to_close(conn: psycopg.Connection[Any]) -> list[TaskToClose]:
    """Fired tasks of closed watches that were not closed in ClickUp yet."""
    return fetch_all(conn, TaskToClose, query("tasks_to_close"))
