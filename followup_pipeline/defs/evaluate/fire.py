"""Steps 3 and 4 of ``evaluate``: due steps to ClickUp through the ledger, exhausted watches.

Also closes, through the ledger, the ClickUp tasks of watches that closed for any reason.
"""

from datetime import date, datetime, time
from typing import Any

from followup_pipeline.defs.evaluate.context import Evaluation
from followup_pipeline.domain.decisions import Close, CloseReason, Decision, decide_for_stage
from followup_pipeline.domain.localtime import local_date, local_to_utc
from followup_pipeline.domain.steps import is_exhausted, select_due
from followup_pipeline.domain.tasks import assignees_for, close_comment, render_task
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError, TransientError
from followup_pipeline.store.ledger import (
    ActionSpec,
    FinalOutcome,
    SuppressReason,
    action_by_key,
    begin_attempt,
    finish_attempt,
    is_dead,
    suppress,
)
from followup_pipeline.store.steps import (
    fire_step,
    latest_summary,
    open_watches,
    set_watch_error,
    skip_step,
    step_states,
    tasks_to_close,
)
from followup_pipeline.store.watches import close_watch, steps_of

DRY_RUN_REF = "dry-run"


def task_key(watch_id: int, step_no: int) -> str:
    """The idempotency key of a step's task."""
    return f"task:{watch_id}:{step_no}"


def _due_at(ev: Evaluation, due_on: date) -> datetime:
    return local_to_utc(due_on, time(ev.settings.business_hours_start), ev.zone)


def _task_spec(ev: Evaluation, watch: dict[str, Any], step_no: int, due_on: date) -> ActionSpec:
    return ActionSpec(
        key=task_key(watch["id"], step_no),
        kind="task",
        due_at=_due_at(ev, due_on),
        time_zone=ev.zone,
        watch_id=watch["id"],
        step_no=step_no,
        payload={"subject_id": watch["subject_id"], "due_on": due_on.isoformat()},
    )


def _skip(
    ev: Evaluation, watch: dict[str, Any], step_no: int, due_on: date, reason: SuppressReason
) -> None:
    with ev.postgres.connection() as conn, conn.transaction():
        if skip_step(conn, watch_id=watch["id"], step_no=step_no, reason=reason, at=ev.now):
            suppress(conn, _task_spec(ev, watch, step_no, due_on), reason=reason)
            ev.counts[f"skipped_{reason}"] += 1


def close_with_steps(ev: Evaluation, watch: dict[str, Any], reason: CloseReason) -> None:
    """Close a watch; its open steps are skipped as ``deal_closed``, their actions suppressed."""
    with ev.postgres.connection() as conn:
        closed = close_watch(conn, watch_id=watch["id"], reason=reason, closed_at=ev.now)
        rows = steps_of(conn, watch["id"])
    if not closed:
        return
    ev.counts[f"closed_{reason}"] += 1
    for row in rows:
        if row["fired_at"] is None and row["skipped_at"] is None:
            _skip(ev, watch, row["step_no"], row["due_on"], "deal_closed")


def process_due_steps(ev: Evaluation) -> None:
    """For each open watch with due steps: re-check the deal, then fire the latest step."""
    with ev.postgres.connection() as conn:
        watches = open_watches(conn)
    for watch in watches:
        with ev.postgres.connection() as conn:
            rows = steps_of(conn, watch["id"])
        due_on = {r["step_no"]: r["due_on"] for r in rows}
        selection = select_due(step_states(rows, ev.zone), ev.today)
        if selection.fire is None:
            continue
        due = [*selection.supersede, selection.fire]
        if watch["paused_at"] is not None:
            for step_no in due:
                _skip(ev, watch, step_no, due_on[step_no], "paused")
            continue
        decision = _recheck(ev, watch)
        if decision is None:
            continue
        if isinstance(decision, Close):
            with ev.postgres.connection() as conn:
                if close_watch(
                    conn, watch_id=watch["id"], reason=decision.reason, closed_at=ev.now
                ):
                    ev.counts[f"closed_{decision.reason}"] += 1
            for step_no in due:
                _skip(ev, watch, step_no, due_on[step_no], "deal_closed")
            continue
        for step_no in selection.supersede:
            _skip(ev, watch, step_no, due_on[step_no], "superseded")
        fire(ev, watch, selection.fire, due_on[selection.fire], step_count=len(rows))


def _recheck(ev: Evaluation, watch: dict[str, Any]) -> Decision | None:
    """The deal's current stage decides; None when the CRM cannot tell (the step waits)."""
    try:
        decision = decide_for_stage(ev.crm.get_deal(deal_id=watch["subject_id"]).stage, ev.policy)
    except NotFoundError:
        decision = Close("subject_gone")
    except IntegrationError as error:
        ev.counts["waiting_on_crm"] += 1
        ev.problem(f"deal {watch['subject_id']}: CRM unreadable, its due step waits: {error}")
        with ev.postgres.connection() as conn:
            set_watch_error(conn, watch_id=watch["id"], error=str(error), at=ev.now)
        return None
    if watch.get("last_error"):
        with ev.postgres.connection() as conn:
            set_watch_error(conn, watch_id=watch["id"], error=None, at=None)
    return decision


def fire(
    ev: Evaluation, watch: dict[str, Any], step_no: int, due_on: date, *, step_count: int
) -> None:
    """Create the step's task through the ledger, searching ClickUp for its key first."""
    spec = _task_spec(ev, watch, step_no, due_on)
    with ev.postgres.connection() as conn:
        existing = action_by_key(conn, spec.key)
        if existing is not None and existing["outcome"] in ("accepted", "confirmed"):
            # The task exists but the step was not marked: finish what a crash interrupted.
            fire_step(
                conn,
                watch_id=watch["id"],
                step_no=step_no,
                task_ref=existing["provider_ref"],
                at=ev.now,
            )
            ev.counts["repaired"] += 1
            return
    if _dead(ev, existing, spec.key):
        return
    if ev.settings.dry_run:
        with ev.postgres.connection() as conn, conn.transaction():
            fire_step(conn, watch_id=watch["id"], step_no=step_no, task_ref=DRY_RUN_REF, at=ev.now)
            suppress(conn, spec, reason="dry_run")
        ev.counts["fired_dry_run"] += 1
        return
    with ev.postgres.connection() as conn:
        attempt = begin_attempt(conn, spec, started_at=ev.now, run_id=ev.run_id)
    if attempt is None:
        return
    outcome: FinalOutcome = "confirmed"
    try:
        found = ev.clickup.find_tasks_by_key(idempotency_key=spec.key)
        if found:
            task = found[0]
            ev.counts["found_existing"] += 1
        else:
            with ev.postgres.connection() as conn:
                summary = latest_summary(conn, watch["subject_id"])
            content = render_task(
                deal_name=watch["subject_name"],
                account_name=watch["account_name"],
                crm_url=watch["crm_url"],
                step_no=step_no,
                step_count=step_count,
                due_on=due_on,
                summary=summary,
            )
            task = ev.clickup.create_task(
                name=content.name,
                markdown=content.markdown,
                due_date=spec.due_at,
                assignees=assignees_for(
                    watch["assigned_user_id"],
                    ev.settings.clickup_user_map,
                    ev.settings.clickup_default_assignee,
                ),
                idempotency_key=spec.key,
            )
            outcome = "accepted"
    except IntegrationError as error:
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
        ev.problem(f"{spec.key}: ClickUp failed, the step stays due: {error}")
        return
    with ev.postgres.connection() as conn, conn.transaction():
        finish_attempt(conn, attempt, outcome=outcome, finished_at=ev.now, provider_ref=task.id)
        fire_step(conn, watch_id=watch["id"], step_no=step_no, task_ref=task.id, at=ev.now)
    ev.counts["fired"] += 1
    if outcome == "accepted":
        _confirm(ev, attempt, task.id)


def _dead(ev: Evaluation, action: dict[str, Any] | None, key: str) -> bool:
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


def _confirm(ev: Evaluation, attempt: Any, task_id: str) -> None:
    """Read the task back; ``confirmed`` if ClickUp shows it, else it stays ``accepted``."""
    try:
        ev.clickup.get_task(task_id=task_id)
    except IntegrationError as error:
        ev.log.info("task %s not read back yet: %s", task_id, error)
        return
    with ev.postgres.connection() as conn:
        finish_attempt(conn, attempt, outcome="confirmed", finished_at=ev.now, provider_ref=task_id)


def close_exhausted(ev: Evaluation) -> None:
    """Close watches whose last step fired ``exhaust_after`` business days ago, no reset since."""
    with ev.postgres.connection() as conn:
        watches = open_watches(conn)
    for watch in watches:
        with ev.postgres.connection() as conn:
            states = step_states(steps_of(conn, watch["id"]), ev.zone)
            reset = watch["last_reset_at"]
            exhausted = is_exhausted(
                states,
                ev.today,
                exhaust_after=ev.settings.exhaust_after,
                calendar=ev.calendar,
                last_reset_on=local_date(reset, ev.zone) if reset else None,
            )
        if exhausted:
            close_with_steps(ev, watch, "exhausted")


def close_tasks_of_closed_watches(ev: Evaluation) -> None:
    """Close, with a comment saying why, the ClickUp tasks of watches that closed."""
    if not ev.settings.clickup_close_on_watch_close:
        return
    with ev.postgres.connection() as conn:
        rows = tasks_to_close(conn)
    for row in rows:
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
        if _dead(ev, existing, spec.key):
            continue
        if ev.settings.dry_run:
            with ev.postgres.connection() as conn:
                suppress(conn, spec, reason="dry_run")
            continue
        with ev.postgres.connection() as conn:
            attempt = begin_attempt(conn, spec, started_at=ev.now, run_id=ev.run_id)
        if attempt is None:
            continue
        try:
            ev.clickup.close_task(
                task_id=row["task_ref"], comment=close_comment(row["closed_reason"])
            )
        except IntegrationError as error:
            ambiguous = isinstance(error, TransientError) and error.ambiguous
            with ev.postgres.connection() as conn:
                finish_attempt(
                    conn,
                    attempt,
                    outcome="unknown" if ambiguous else "failed",
                    finished_at=ev.now,
                    error=str(error),
                )
            ev.problem(f"{spec.key}: closing task {row['task_ref']} failed: {error}")
            continue
        with ev.postgres.connection() as conn:
            finish_attempt(
                conn, attempt, outcome="confirmed", finished_at=ev.now, provider_ref=row["task_ref"]
            )
        ev.counts["tasks_closed"] += 1
