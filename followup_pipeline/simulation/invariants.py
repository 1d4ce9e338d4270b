"""What must be true at the end of a simulation, checked against the database and what the
vendors hold (the sandbox): the machine's promise (docs/architecture.md §4) record by record.
Every due action ended done, deliberately suppressed with a reason, or parked with an owner;
nothing is doubled at a vendor.

``check`` runs them all and returns one ``Invariant`` each, with how many records it looked at
and the first violations by name. It expects the machine to have settled: the chaos over, and a
last pass of every job run at ``end`` (a step due today is fired by an ``evaluate`` of today).
This module holds the follow-up side (due steps, ClickUp's tasks, the event log);
``invariants_mail.py`` the reports and alerts, ``invariants_lms.py`` the leads and the learning
reminders; ``evidence.py`` reads the vendors' side.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, time, timedelta
from typing import Any, LiteralString

import psycopg

from followup_pipeline.domain.localtime import local_to_utc
from followup_pipeline.domain.steps import DRY_RUN_REF, task_key
from followup_pipeline.engine.account import account
from followup_pipeline.integrations.clickup import key_tag
from followup_pipeline.settings import Settings
from followup_pipeline.simulation import invariants_lms, invariants_mail
from followup_pipeline.simulation.evidence import (
    Control,
    Evidence,
    Invariant,
    ReportWindow,
    gather,
    is_dead,
    rows,
    verdict,
)
from followup_pipeline.store.events import HANDLED_SOURCES

__all__ = ["Invariant", "ReportWindow", "check"]


STEPS: LiteralString = """
SELECT s.watch_id, s.step_no, s.due_on, s.task_ref, s.skip_reason, w.time_zone, w.closed_at,
       a.outcome, a.reason, a.attempts, a.replayed_attempts
FROM followup.watch_steps s
JOIN followup.watches w ON w.id = s.watch_id
LEFT JOIN followup.actions a ON a.idempotency_key = 'task:' || s.watch_id || ':' || s.step_no
WHERE s.due_on <= %(last_day)s
ORDER BY s.watch_id, s.step_no
"""
STEP_TASKS: LiteralString = """
SELECT watch_id, step_no, task_ref FROM followup.watch_steps ORDER BY watch_id, step_no
"""
CLICKUP_KEYS: LiteralString = """
SELECT idempotency_key FROM followup.actions WHERE kind IN ('task', 'alert')
"""
EVENTS: LiteralString = """
SELECT id, source, status, attempts, dead_step, last_error FROM followup.events ORDER BY id
"""


def check(
    conn: psycopg.Connection[Any],
    control: Control,
    settings: Settings,
    *,
    end: datetime,
    windows: Sequence[ReportWindow],
) -> list[Invariant]:
    """Every invariant at ``end``, the instant the simulation stopped: the follow-up steps, the
    tasks, the events, the reports of ``windows``, the alerts, the leads and the learning
    reminders. ``control`` calls the sandbox's control API; the CRM's Leads are read through its
    API at the settings' URL."""
    evidence = gather(control, settings)
    return [
        due_steps(conn, evidence, settings, end=end),
        one_task_per_key(conn, evidence),
        events_settled(conn, settings),
        invariants_mail.reports_once(conn, evidence, settings, windows),
        invariants_mail.alerts_within_limits(conn, evidence, settings),
        *invariants_lms.leads(conn, evidence, settings),
        *invariants_lms.learning(conn, evidence, settings, end=end),
        nothing_unaccounted(conn, settings, end=end),
    ]


#: How far back the account of a simulation reaches: its whole run (60 business days).
SIMULATED = timedelta(days=120)


def nothing_unaccounted(
    conn: psycopg.Connection[Any], settings: Settings, *, end: datetime
) -> Invariant:
    """The account of every action due over the run (``followup account``): nothing due past
    its kind's grace is neither done, suppressed with a reason, waiting with an owner nor in
    flight (the list of work brought up to date first, as every alert tick does)."""
    result = account(conn, settings, since=end - SIMULATED, until=end)
    broken = [
        f"{entry.pipeline} {entry.kind} {entry.name} (due {entry.due_at:%Y-%m-%d %H:%M} UTC)"
        for entry in result.unaccounted
    ]
    checked = sum(line.due for line in result.lines.values())
    return verdict("nothing unaccounted after its grace", checked, broken)


def due_steps(
    conn: psycopg.Connection[Any], evidence: Evidence, settings: Settings, *, end: datetime
) -> Invariant:
    """Every follow-up step due by ``end`` ended as one ClickUp task, deliberately suppressed, or
    as a dead letter with an owner.

    Due: its day (``due_on``, a business day by its plan) had begun its business hours
    (``FOLLOWUP_BUSINESS_HOURS_START`` in the watch's zone, the ledger's ``due_at`` of its task)
    by ``end``, and, on a closed watch, before the watch closed (a step planned beyond its
    watch's close was never due). A paused watch is no exception: ``evaluate`` skips its due
    steps as ``paused``.
    """
    found = rows(conn, STEPS, {"last_day": (end + timedelta(days=1)).date()})
    opens = time(settings.business_hours_start)
    checked = 0
    broken: list[str] = []
    for row in found:
        due_at = local_to_utc(row["due_on"], opens, row["time_zone"])
        closed = row["closed_at"]
        if due_at > end or (closed is not None and due_at > closed):
            continue
        checked += 1
        problem = _step_problem(row, evidence, settings)
        if problem is not None:
            step = task_key(row["watch_id"], row["step_no"])
            broken.append(f"step {step} (due {row['due_on']}): {problem}")
    return verdict("due steps ended once", checked, broken)


def _step_problem(row: dict[str, Any], evidence: Evidence, settings: Settings) -> str | None:
    """What is wrong with a due step, None when it ended well."""
    key = task_key(row["watch_id"], row["step_no"])
    task_ref = row["task_ref"]
    if task_ref == DRY_RUN_REF:
        return None if row["reason"] == "dry_run" else "fired dry, its action not suppressed"
    if task_ref is not None:
        carrying = [task.id for task in evidence.carrying(key)]
        if task_ref not in carrying:
            held = any(task.id == task_ref for task in evidence.tasks)
            return (
                f"its task {task_ref} does not carry its key"
                if held
                else f"its task {task_ref} is not in ClickUp"
            )
        if len(carrying) > 1:
            return f"its key is on {len(carrying)} tasks: {', '.join(carrying)}"
        return None
    if row["skip_reason"] is not None:
        return None
    if row["outcome"] == "suppressed":
        # The ledger's own record of a deliberate suppression, with its reason.
        return None if row["reason"] else "suppressed without a reason"
    if is_dead(row, settings.action_max_attempts):
        return None if settings.ops_owner else "a dead letter with no owner (FOLLOWUP_OPS_OWNER)"
    state = row["outcome"] or "no action"
    attempts = f", {row['attempts']} attempt(s)" if row["outcome"] else ""
    return f"neither fired nor skipped ({state}{attempts})"


def one_task_per_key(conn: psycopg.Connection[Any], evidence: Evidence) -> Invariant:
    """No key is on two ClickUp tasks (the custom field, or its ``fu-`` tag), no two steps
    record one task, and no task carries a step's key other than the one its step records (a
    second task for the step, or one the machine forgot)."""
    names = {f"tag:{key_tag(r['idempotency_key'])}": r["idempotency_key"]
             for r in rows(conn, CLICKUP_KEYS)}  # fmt: skip
    broken = [
        f"{names.get(mark, mark.removeprefix('field:'))} is on {len(on)} tasks: "
        + ", ".join(task.id for task in on)
        for mark, on in evidence.by_mark.items()
        if len(on) > 1
    ]
    steps = rows(conn, STEP_TASKS)
    recorded: dict[str, list[str]] = defaultdict(list)
    for step in steps:
        if step["task_ref"] not in (None, DRY_RUN_REF):
            recorded[step["task_ref"]].append(task_key(step["watch_id"], step["step_no"]))
    broken += [
        f"task {task_ref} is recorded by {len(keys)} steps: {', '.join(keys)}"
        for task_ref, keys in recorded.items()
        if len(keys) > 1
    ]
    for step in steps:
        key = task_key(step["watch_id"], step["step_no"])
        for task in evidence.carrying(key):
            if task.id != step["task_ref"]:
                said = step["task_ref"] or "no task"
                broken.append(f"task {task.id} carries {key}, whose step records {said}")
    return verdict("one task per key", len(evidence.tasks), broken)


def events_settled(conn: psycopg.Connection[Any], settings: Settings) -> Invariant:
    """Every event of the log is ``done`` or ``dead`` (a dead letter, with an owner); ``unhandled``
    only for a source that has no handler (``HANDLED_SOURCES``); none ``pending``."""
    found = rows(conn, EVENTS)
    broken: list[str] = []
    for row in found:
        name = f"event:{row['id']} ({row['source']})"
        status = row["status"]
        if status == "done":
            continue
        if status == "dead":
            if not settings.ops_owner:
                broken.append(f"{name}: a dead letter with no owner (FOLLOWUP_OPS_OWNER)")
        elif status == "unhandled":
            if row["source"] in HANDLED_SOURCES:
                broken.append(f"{name}: unhandled, though its source has a handler")
        else:
            error = f", last error: {row['last_error']}" if row["last_error"] else ""
            broken.append(f"{name}: still {status} after {row['attempts']} attempt(s){error}")
    return verdict("events settled", len(found), broken)
