"""Steps 3 and 4 of ``evaluate``: each watch's due steps, and watches that went quiet.

For a watch with due steps: settle any task that may exist already, re-read the deal in the CRM
(a step is never fired unverified), then fire the latest due step and supersede the older ones.
"""

from typing import Any, Literal

from followup_pipeline.defs.evaluate.context import Evaluation
from followup_pipeline.defs.evaluate.fire import fire, resolve_pending, skip
from followup_pipeline.domain.decisions import Close, CloseReason, decide_for_stage
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.steps import is_exhausted, select_due
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError
from followup_pipeline.integrations.espocrm_models import Deal
from followup_pipeline.store.steps import (
    open_watches,
    refresh_subject,
    set_watch_error,
    step_states,
    watch_by_id,
)
from followup_pipeline.store.watches import close_watch, steps_of

GONE: Literal["gone"] = "gone"


def close_with_steps(ev: Evaluation, watch: dict[str, Any], reason: CloseReason) -> None:
    """Close a watch; its open steps are skipped as ``deal_closed`` (a task that exists is kept
    as fired, so that it gets closed in ClickUp with the watch)."""
    with ev.postgres.connection() as conn:
        closed = close_watch(conn, watch_id=watch["id"], reason=reason, closed_at=ev.now)
        rows = steps_of(conn, watch["id"])
    if not closed:
        return
    ev.counts[f"closed_{reason}"] += 1
    for row in rows:
        if row["fired_at"] is None and row["skipped_at"] is None:
            skip(ev, watch, row["step_no"], row["due_on"], "deal_closed")


def process_due_steps(ev: Evaluation) -> None:
    """For each open watch with due steps: re-check the deal, then fire the latest step."""
    with ev.postgres.connection() as conn:
        ids = [w["id"] for w in open_watches(conn)]
    for watch_id in ids:
        _process_watch(ev, watch_id)


def _process_watch(ev: Evaluation, watch_id: int) -> None:
    # Read fresh: an operator may have paused the watch while this run was going.
    with ev.postgres.connection() as conn:
        watch = watch_by_id(conn, watch_id)
        rows = steps_of(conn, watch_id) if watch else []
    if watch is None or watch["closed_at"] is not None:
        return
    today = local_date(ev.now, watch["time_zone"])
    due_on = {r["step_no"]: r["due_on"] for r in rows}
    selection = select_due(step_states(rows, watch["time_zone"]), today)
    if selection.fire is None:
        return
    due = [*selection.supersede, selection.fire]
    settled = [resolve_pending(ev, watch, step_no) for step_no in due]
    if "unreadable" in settled:
        return
    if "fired" in settled:
        # A task of this catch-up exists already: it is the one task; the rest are superseded.
        for step_no, state in zip(due, settled, strict=True):
            if state == "nothing":
                skip(ev, watch, step_no, due_on[step_no], "superseded")
        return
    if watch["paused_at"] is not None:
        for step_no in due:
            skip(ev, watch, step_no, due_on[step_no], "paused")
        return
    if watch_id in ev.unreadable:
        ev.counts["waiting_on_crm"] += 1
        return  # its activity could not be read: a reset might postpone the step
    deal = _recheck(ev, watch)
    if deal is None:
        return
    decision = decide_for_stage(None if deal == GONE else deal.stage, ev.policy)
    if isinstance(decision, Close):  # a deleted deal (no stage) closes as subject_gone
        close_with_steps(ev, watch, decision.reason)
        return
    assert isinstance(deal, Deal)
    for step_no in selection.supersede:
        skip(ev, watch, step_no, due_on[step_no], "superseded")
    fire(ev, watch, deal, selection.fire, due_on[selection.fire], total=len(rows))


def _recheck(ev: Evaluation, watch: dict[str, Any]) -> Deal | Literal["gone"] | None:
    """The deal as the CRM has it now (refreshing the watch's copy), ``GONE`` if it was deleted,
    None when the CRM cannot tell: then the step waits, and the error is kept on the watch."""
    try:
        deal = ev.crm.get_deal(deal_id=watch["subject_id"])
    except NotFoundError:
        return GONE
    except IntegrationError as error:
        ev.counts["waiting_on_crm"] += 1
        ev.problem(f"deal {watch['subject_id']}: CRM unreadable, its due step waits: {error}")
        with ev.postgres.connection() as conn:
            set_watch_error(conn, watch_id=watch["id"], error=str(error), at=ev.now)
        return None
    with ev.postgres.connection() as conn:
        refresh_subject(conn, watch_id=watch["id"], deal=deal)
    return deal


def close_exhausted(ev: Evaluation) -> None:
    """Close watches whose last step fired ``exhaust_after`` business days ago, no reset since."""
    with ev.postgres.connection() as conn:
        watches = open_watches(conn)
    for watch in watches:
        zone = watch["time_zone"]
        with ev.postgres.connection() as conn:
            states = step_states(steps_of(conn, watch["id"]), zone)
        reset = watch["last_reset_at"]
        if is_exhausted(
            states,
            local_date(ev.now, zone),
            exhaust_after=ev.settings.exhaust_after,
            calendar=ev.calendar,
            last_reset_on=local_date(reset, zone) if reset else None,
        ):
            close_with_steps(ev, watch, "exhausted")
