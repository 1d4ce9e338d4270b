"""The ledger side of ``evaluate``: create, resolve, suppress and close tasks in ClickUp.

Every task is an action keyed ``task:{watch}:{step}``. The row says ``attempted`` (committed)
before ClickUp is called; ClickUp is searched for the key before any create; a step is marked
fired only in the transaction that records its task. A row left ``attempted`` or ``unknown`` is
resolved by asking ClickUp before the step is skipped for any reason, so a task that was created
is never forgotten (ARCHITECTURE.md §4).
"""

from datetime import date, time
from typing import Any, Literal

from followup_pipeline.defs.evaluate.context import Evaluation
from followup_pipeline.domain.localtime import local_to_utc
from followup_pipeline.domain.tasks import assignees_for, close_comment, render_task
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError, TransientError
from followup_pipeline.integrations.espocrm_models import Deal
from followup_pipeline.store.ledger import (
    ActionSpec,
    Attempt,
    FinalOutcome,
    SuppressReason,
    action_by_key,
    begin_attempt,
    finish_attempt,
    is_dead,
    suppress,
)
from followup_pipeline.store.steps import fire_step, latest_summary, skip_step, tasks_to_close

DRY_RUN_REF = "dry-run"
RATE_LIMITED = 429
Resolution = Literal["nothing", "fired", "unreadable"]


def task_key(watch_id: int, step_no: int) -> str:
    """The idempotency key of a step's task."""
    return f"task:{watch_id}:{step_no}"


def task_spec(ev: Evaluation, watch: dict[str, Any], step_no: int, due_on: date) -> ActionSpec:
    """The ledger's description of a step's task."""
    zone = watch["time_zone"]
    return ActionSpec(
        key=task_key(watch["id"], step_no),
        kind="task",
        due_at=local_to_utc(due_on, time(ev.settings.business_hours_start), zone),
        time_zone=zone,
        watch_id=watch["id"],
        step_no=step_no,
        payload={"subject_id": watch["subject_id"], "due_on": due_on.isoformat()},
    )


def resolve_pending(ev: Evaluation, watch: dict[str, Any], step_no: int) -> Resolution:
    """Settle a step whose task may exist: an ``attempted``/``unknown`` row asks ClickUp first.

    ``fired`` when the task exists (the step is now marked fired with it), ``nothing`` when no
    task exists, ``unreadable`` when ClickUp could not tell (the step must wait).
    """
    key = task_key(watch["id"], step_no)
    with ev.postgres.connection() as conn:
        action = action_by_key(conn, key)
    if action is None or action["outcome"] not in ("attempted", "unknown", "accepted"):
        return "nothing"
    attempt = Attempt(action_id=action["id"], attempt_no=action["attempts"])
    task_id = action["provider_ref"] if action["outcome"] == "accepted" else None
    if task_id is None:
        try:
            found = ev.clickup.find_tasks_by_key(idempotency_key=key)
        except IntegrationError as error:
            ev.problem(f"{key}: ClickUp unreadable, the step waits: {error}")
            return "unreadable"
        if not found:
            return "nothing"
        task_id = found[0].id
    with ev.postgres.connection() as conn, conn.transaction():
        finish_attempt(conn, attempt, outcome="confirmed", finished_at=ev.now, provider_ref=task_id)
        fire_step(conn, watch_id=watch["id"], step_no=step_no, task_ref=task_id, at=ev.now)
    ev.counts["resolved_existing"] += 1
    return "fired"


def skip(
    ev: Evaluation, watch: dict[str, Any], step_no: int, due_on: date, reason: SuppressReason
) -> Resolution:
    """Skip an open step for ``reason`` and suppress its action, unless its task exists."""
    resolution = resolve_pending(ev, watch, step_no)
    if resolution != "nothing":
        return resolution
    with ev.postgres.connection() as conn, conn.transaction():
        if skip_step(conn, watch_id=watch["id"], step_no=step_no, reason=reason, at=ev.now):
            suppress(conn, task_spec(ev, watch, step_no, due_on), reason=reason)
            ev.counts[f"skipped_{reason}"] += 1
    return "nothing"


def dead(ev: Evaluation, action: dict[str, Any] | None, key: str) -> bool:
    """Whether the action waits as a dead letter (counted, and left alone)."""
    if not is_dead(action, max_attempts=ev.settings.action_max_attempts):
        return False
    ev.counts["dead_letters"] += 1
    ev.log.warning(
        "%s failed %s times and waits as a dead letter: followup dead-letters replay action:%s",
        key,
        ev.settings.action_max_attempts,
        key,
    )
    return True


def _failed(ev: Evaluation, attempt: Attempt, key: str, error: IntegrationError) -> None:
    ambiguous = isinstance(error, TransientError) and error.ambiguous
    with ev.postgres.connection() as conn:
        finish_attempt(
            conn,
            attempt,
            outcome="unknown" if ambiguous else "failed",
            finished_at=ev.now,
            error=str(error),
        )
    ev.counts["failed"] += 1
    if isinstance(error, TransientError) and error.status == RATE_LIMITED:
        # ClickUp's minute window is spent: no more writes this run, the next run goes on.
        ev.clickup_rate_limited = True
    ev.problem(f"{key}: ClickUp failed, the step stays due: {error}")


def fire(
    ev: Evaluation, watch: dict[str, Any], deal: Deal, step_no: int, due_on: date, *, total: int
) -> None:
    """Create the step's task through the ledger, searching ClickUp for its key first."""
    spec = task_spec(ev, watch, step_no, due_on)
    with ev.postgres.connection() as conn:
        existing = action_by_key(conn, spec.key)
    if dead(ev, existing, spec.key):
        return
    if ev.settings.dry_run:
        with ev.postgres.connection() as conn, conn.transaction():
            fire_step(conn, watch_id=watch["id"], step_no=step_no, task_ref=DRY_RUN_REF, at=ev.now)
            suppress(conn, spec, reason="dry_run")
        ev.counts["fired_dry_run"] += 1
        return
    if ev.clickup_rate_limited:
        ev.counts["waiting_on_clickup_rate_limit"] += 1
        return
    with ev.postgres.connection() as conn:
        attempt = begin_attempt(conn, spec, started_at=ev.now, run_id=ev.run_id)
    if attempt is None:
        return  # it reached ClickUp before; resolve_pending has marked the step
    outcome: FinalOutcome = "confirmed"
    try:
        found = ev.clickup.find_tasks_by_key(idempotency_key=spec.key)
        if found:
            task_id = found[0].id
            ev.counts["found_existing"] += 1
        else:
            with ev.postgres.connection() as conn:
                summary = latest_summary(conn, watch["subject_id"])
            content = render_task(
                deal_name=deal.name,
                account_name=deal.account_name,
                crm_url=ev.crm_url(deal.id),
                step_no=step_no,
                step_count=total,
                due_on=due_on,
                summary=summary,
            )
            task_id = ev.clickup.create_task(
                name=content.name,
                markdown=content.markdown,
                due_date=spec.due_at,
                assignees=assignees_for(
                    deal.assigned_user_id,
                    ev.settings.clickup_user_map,
                    ev.settings.clickup_default_assignee,
                ),
                idempotency_key=spec.key,
            ).id
            outcome = "accepted"
    except IntegrationError as error:
        _failed(ev, attempt, spec.key, error)
        return
    with ev.postgres.connection() as conn, conn.transaction():
        finish_attempt(conn, attempt, outcome=outcome, finished_at=ev.now, provider_ref=task_id)
        fire_step(conn, watch_id=watch["id"], step_no=step_no, task_ref=task_id, at=ev.now)
    ev.counts["fired"] += 1
    if outcome == "accepted":
        _confirm(ev, attempt, task_id)


def _confirm(ev: Evaluation, attempt: Attempt, task_id: str) -> None:
    """Read the task back; ``confirmed`` if ClickUp shows it, else it stays ``accepted``."""
    try:
        ev.clickup.get_task(task_id=task_id)
    except IntegrationError as error:
        ev.log.info("task %s not read back yet: %s", task_id, error)
        return
    with ev.postgres.connection() as conn:
        finish_attempt(conn, attempt, outcome="confirmed", finished_at=ev.now, provider_ref=task_id)


def close_tasks_of_closed_watches(ev: Evaluation) -> None:
    """Close, with a comment saying why, the ClickUp tasks of watches that closed."""
    if not ev.settings.clickup_close_on_watch_close:
        return
    with ev.postgres.connection() as conn:
        rows = tasks_to_close(conn)
    for row in rows:
        _close_task(ev, row)


def _close_task(ev: Evaluation, row: dict[str, Any]) -> None:
    spec = ActionSpec(
        key=f"close_task:{row['watch_id']}:{row['step_no']}",
        kind="close_task",
        due_at=row["closed_at"],
        time_zone=row["time_zone"],
        watch_id=row["watch_id"],
        step_no=row["step_no"],
        payload={"task_id": row["task_ref"], "reason": row["closed_reason"]},
    )
    with ev.postgres.connection() as conn:
        existing = action_by_key(conn, spec.key)
    if dead(ev, existing, spec.key):
        return
    if ev.settings.dry_run:
        with ev.postgres.connection() as conn:
            suppress(conn, spec, reason="dry_run")
        return
    if ev.clickup_rate_limited:
        return
    with ev.postgres.connection() as conn:
        attempt = begin_attempt(conn, spec, started_at=ev.now, run_id=ev.run_id)
    if attempt is None:
        return
    note = None
    try:
        ev.clickup.close_task(task_id=row["task_ref"], comment=close_comment(row["closed_reason"]))
    except NotFoundError:
        # Someone deleted the task: what closing it wanted is already true.
        note = "the task no longer exists in ClickUp"
    except IntegrationError as error:
        _failed(ev, attempt, spec.key, error)
        return
    with ev.postgres.connection() as conn:
        finish_attempt(
            conn,
            attempt,
            outcome="confirmed",
            finished_at=ev.now,
            provider_ref=row["task_ref"],
            error=note,
        )
    ev.counts["tasks_closed"] += 1
