"""Steps of watches (``watch_steps``): planned, fired with a task, skipped with a reason; the
task's upkeep (the summary it shows, the activity that overtook it, the tasks to close and to
write again) and the last contact its text names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

import psycopg

from followup_pipeline.domain.cadence import PlannedStep
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.steps import StepState
from followup_pipeline.domain.tasks import Language, closing, contact_of
from followup_pipeline.store.db import fetch_all, fetch_one
from followup_pipeline.store.queries import query
from followup_pipeline.store.watches import SUBJECT_TYPE

#: What resets a cadence: an e-mail, a call or a meeting that was held, or a task completed in
#: ClickUp (with ``FOLLOWUP_CLICKUP_COMPLETION_RESETS``).
ContactKind = Literal["email", "call", "meeting", "task"]


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
    #: The task's own address, as ClickUp gave it (None: not known, or no task).
    task_url: str | None = None

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
    """A task in ClickUp to be closed, and why: a later step of its watch has a task of its own
    (``superseded_by``), activity overtook it (``overtaken_at``, ``overtaken_by``), or its watch
    closed (``closed_reason``); the first that applies is the reason."""

    watch_id: int
    step_no: int
    task_ref: str
    time_zone: str
    step_count: int
    fired_at: datetime
    closed_reason: str | None
    closed_at: datetime | None
    overtaken_at: datetime | None
    overtaken_by: str | None
    superseded_by: int | None

    def closing(self, language: Language, now: datetime) -> tuple[str, str]:
        """Why the task is closed and the comment saying so, in ``language``, its dates local to
        the watch's time zone."""
        zone = self.time_zone
        contact = None
        if self.overtaken_at is not None:
            contact = contact_of(self.overtaken_by, local_date(self.overtaken_at, zone))
        return closing(
            language,
            local_date(now, zone),
            superseded_by=self.superseded_by,
            step_count=self.step_count,
            contact=contact,
            closed_reason=self.closed_reason,
        )


@dataclass(frozen=True)
class TaskToUpdate:
    """The open task of an open watch whose deal has a newer summary than the task shows."""

    watch_id: int
    step_no: int
    due_on: date
    task_ref: str
    step_count: int
    summary_hash: str
    line1: str
    line2: str


@dataclass(frozen=True)
class TaskSummary:
    """A deal's newest two-line summary and its input hash (which names it)."""

    input_hash: str
    line1: str
    line2: str


@dataclass(frozen=True)
class LastContact:
    """What a watch knows of its deal's last contact: the activity that last reset its cadence
    (when, and what it was: ``email``, ``call``, ``meeting``, ``task``, or unknown), and the day its
    cadence began."""

    last_reset_at: datetime | None
    last_reset_kind: str | None
    base_on: date


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
    conn: psycopg.Connection[Any],
    *,
    watch_id: int,
    step_no: int,
    task_ref: str,
    at: datetime,
    task_summary: str | None = None,
    task_url: str | None = None,
) -> bool:
    """Mark a step fired with its task, the task's own address (``task_url``, as ClickUp gave
    it; None: not known) and the summary (input hash) the task was written with; False if it was
    not open."""
    params = {
        "watch_id": watch_id,
        "step_no": step_no,
        "task_ref": task_ref,
        "task_url": task_url,
        "fired_at": at,
        "task_summary": task_summary,
    }
    return conn.execute(query("fire_step"), params).fetchone() is not None


def skip_step(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, reason: str, at: datetime
) -> bool:
    """Mark a step skipped for ``reason``; False if it was not open."""
    params = {"watch_id": watch_id, "step_no": step_no, "reason": reason, "skipped_at": at}
    return conn.execute(query("skip_step"), params).fetchone() is not None


def skip_through(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, reason: str, at: datetime
) -> int:
    """Skip step ``step_no`` and every open step before it for ``reason`` (a person decided a
    late step is done with: an earlier one must not fire in its place); how many."""
    params = {"watch_id": watch_id, "step_no": step_no, "reason": reason, "skipped_at": at}
    return len(conn.execute(query("skip_steps_through"), params).fetchall())


def replan_step(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, due_on: date
) -> None:
    """Plan an unfired step again for ``due_on``."""
    conn.execute(query("replan_step"), {"watch_id": watch_id, "step_no": step_no, "due_on": due_on})


def open_steps_of_closed_watches(conn: psycopg.Connection[Any]) -> list[OpenStep]:
    """Steps left open on closed watches (their skip had to wait), oldest first."""
    return fetch_all(conn, OpenStep, query("open_steps_of_closed_watches"))


def tasks_to_close(conn: psycopg.Connection[Any], *, on_watch_close: bool) -> list[TaskToClose]:
    """Tasks to close in ClickUp that have no closing action done: superseded by a later step's
    task, overtaken by activity, or (when ``on_watch_close``) of a closed watch."""
    return fetch_all(conn, TaskToClose, query("tasks_to_close"), {"on_watch_close": on_watch_close})


def tasks_to_update(conn: psycopg.Connection[Any]) -> list[TaskToUpdate]:
    """Open tasks of open watches whose deal has a newer summary than the task shows."""
    return fetch_all(conn, TaskToUpdate, query("tasks_to_update"))


def set_task_summary(
    conn: psycopg.Connection[Any], *, watch_id: int, step_no: int, task_summary: str
) -> None:
    """Record the summary (input hash) a step's task shows now."""
    params = {"watch_id": watch_id, "step_no": step_no, "task_summary": task_summary}
    conn.execute(query("set_task_summary"), params)


def newest_summary(conn: psycopg.Connection[Any], subject_id: str) -> TaskSummary | None:
    """A deal's newest summary with its input hash: what its task is written with."""
    params = {"subject_type": SUBJECT_TYPE, "subject_id": subject_id}
    return fetch_one(conn, TaskSummary, query("newest_summary"), params)


def record_contact(conn: psycopg.Connection[Any], *, watch_id: int, kind: ContactKind) -> None:
    """What reset the watch's cadence (kept beside ``last_reset_at``, which ``mark_reset`` sets in
    the same transaction): its task says what the last contact was."""
    conn.execute(query("record_contact"), {"watch_id": watch_id, "kind": kind})


def last_contact(conn: psycopg.Connection[Any], watch_id: int) -> LastContact | None:
    """The watch's last contact as the machine knows it."""
    return fetch_one(conn, LastContact, query("last_contact"), {"watch_id": watch_id})


def mark_overtaken(
    conn: psycopg.Connection[Any], *, watch_id: int, at: datetime, kind: ContactKind
) -> list[int]:
    """Activity (``kind`` at ``at``) overtook the watch's tasks that are not closed yet: they are
    to be closed saying so. The step numbers marked."""
    params = {"watch_id": watch_id, "at": at, "kind": kind}
    return [int(row["step_no"]) for row in conn.execute(query("mark_overtaken"), params)]
