"""Operator control of a watch: pause (to a day, or until resumed), resume, and unwatch.

Call each inside a transaction: the checks and the writes land together.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import psycopg

from followup_pipeline.domain.cadence import PlannedStep, replan_steps
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.store.db import require_transaction
from followup_pipeline.store.steps import replan_step, steps_of
from followup_pipeline.store.watches import Watch, close_watches, set_paused, watch_by_id


class WatchControlError(ValueError):
    """The watch cannot be paused or resumed (unknown, closed, or already so)."""


def pause_watch(
    conn: psycopg.Connection[Any], *, watch_id: int, now: datetime, until: date | None = None
) -> None:
    """Pause an open watch: its due steps are skipped as ``paused`` until it resumes (by hand,
    or on the day ``until``, by the first evaluate run of that day). A day that is not after
    today in the watch's zone is refused."""
    require_transaction(conn, "pause_watch")
    watch = _open(conn, watch_id)
    if watch.paused_at is not None:
        raise WatchControlError(f"watch {watch_id} is paused already")
    if until is not None and until <= local_date(now, watch.time_zone):
        raise WatchControlError(
            f"--until {until}: that day is not after today ({local_date(now, watch.time_zone)})"
        )
    set_paused(conn, watch_id=watch_id, at=now, until=until)


def unwatch(conn: psycopg.Connection[Any], *, watch_id: int, now: datetime) -> Watch:
    """Close an open watch ``unwatched``, an operator's decision: no new watch while its deal
    stays in this stage (``domain/registration.py``). The watch as it was."""
    require_transaction(conn, "unwatch")
    watch = _open(conn, watch_id)
    close_watches(conn, {watch_id: "unwatched"}, closed_at=now)
    return watch


def resume_watch(
    conn: psycopg.Connection[Any], *, watch_id: int, now: datetime, calendar: BusinessCalendar
) -> list[PlannedStep]:
    """Resume a paused watch: every step not fired (paused ones included) planned from today."""
    require_transaction(conn, "resume_watch")
    watch = _open(conn, watch_id)
    if watch.paused_at is None:
        raise WatchControlError(f"watch {watch_id} is not paused")
    today = local_date(now, watch.time_zone)
    pending = [
        step.planned()
        for step in steps_of(conn, watch_id)
        if step.fired_at is None and step.skip_reason in (None, "paused")
    ]
    planned = replan_steps(today, pending, calendar)
    for step in planned:
        replan_step(conn, watch_id=watch_id, step_no=step.step_no, due_on=step.due_on)
    set_paused(conn, watch_id=watch_id, at=None)
    return planned


def _open(conn: psycopg.Connection[Any], watch_id: int) -> Watch:
    """The open watch, locked until the transaction ends (a pause, resume or unwatch at the same
    time waits, then sees what the first did)."""
    watch = watch_by_id(conn, watch_id, lock=True)
    if watch is None:
        raise WatchControlError(f"no watch {watch_id}")
    if watch.closed_at is not None:
        raise WatchControlError(f"watch {watch_id} is closed ({watch.closed_reason})")
    return watch
