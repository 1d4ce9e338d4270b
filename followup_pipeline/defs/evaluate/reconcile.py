"""Step 1 and 2 of ``evaluate``: reconcile watches with the CRM, reset cadences on activity.

A lost webhook costs at most one hour: every CRM deal in a watched stage gets a watch, and every
open watch whose deal left is closed with the reason the CRM gives.
"""

from datetime import datetime
from typing import Any

import dagster as dg

from followup_pipeline.defs.evaluate.context import Evaluation
from followup_pipeline.defs.evaluate.due import close_with_steps
from followup_pipeline.domain.cadence import PlannedStep, replan_steps
from followup_pipeline.domain.decisions import Close, decide_for_stage
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError
from followup_pipeline.integrations.espocrm_models import Deal
from followup_pipeline.store.steps import (
    count_open_watches,
    mark_reset,
    open_watches,
    replan_step,
    set_watch_error,
)
from followup_pipeline.store.watches import Subject, latest_watch_of, open_watch, steps_of

#: Calls and meetings count as activity once held; planned ones are not activity yet.
HELD = "Held"


def subject_of(deal: Deal, ev: Evaluation) -> Subject:
    """What a watch copies from a CRM deal."""
    return Subject(
        subject_id=deal.id,
        name=deal.name,
        stage=deal.stage,
        account_name=deal.account_name,
        assigned_user_id=deal.assigned_user_id,
        assigned_user_name=deal.assigned_user_name,
        crm_url=ev.crm_url(deal.id),
    )


def check_stage_names(ev: Evaluation) -> None:
    """Fail loudly when a configured stage is not one of the CRM's stages."""
    valid = ev.crm.stage_options()
    configured = [*ev.settings.watched_stages, ev.settings.won_stage, ev.settings.lost_stage]
    bad = [stage for stage in configured if stage not in valid]
    if bad:
        raise dg.Failure(
            description=(
                f"configured stage(s) {', '.join(repr(s) for s in bad)} do not exist in the CRM; "
                f"valid stages: {', '.join(repr(s) for s in valid)}. "
                "Check FOLLOWUP_WATCHED_STAGES, FOLLOWUP_WON_STAGE and FOLLOWUP_LOST_STAGE."
            ),
            metadata={"bad_stages": bad, "valid_stages": valid},
        )


def reconcile(ev: Evaluation) -> None:
    """Open the missing watches and close those whose deal left the watched stages."""
    try:
        listing = ev.crm.list_deals(stages=ev.settings.watched_stages)
    except IntegrationError as error:
        ev.problem(f"CRM listing failed, no registrations or closes this run: {error}")
        return
    for broken in listing.invalid:
        ev.problem(f"CRM record breaks its schema, skipped: {broken}; raw record: {broken.raw!r}")
    listed = {deal.id: deal for deal in listing.records}
    ev.counts["crm_deals_watched_stages"] = len(listed)
    with ev.postgres.connection() as conn:
        watches = {w["subject_id"]: w for w in open_watches(conn)}
    quiet = 0
    for deal in listed.values():
        if deal.id in watches:
            continue
        with ev.postgres.connection() as conn:
            latest = latest_watch_of(conn, deal.id)
            if latest is not None and latest["closed_reason"] == "exhausted":
                quiet += 1
                ev.counts["not_reopened_exhausted"] += 1
                continue
            opened = open_watch(
                conn,
                subject=subject_of(deal, ev),
                plan=ev.plan,
                registered_at=ev.now,
                registered_by="reconcile",
            )
        if opened is not None:
            ev.counts["registered"] += 1
    for subject_id, watch in watches.items():
        if subject_id not in listed:
            close_departed(ev, watch)
    with ev.postgres.connection() as conn:
        still_open = count_open_watches(conn)
    if len(listed) - quiet > 0 and still_open == 0:
        raise dg.Failure(
            description=(
                f"the CRM has {len(listed) - quiet} deal(s) in the watched stages but no watch is "
                "open after reconciliation: the machine would follow up nothing"
            )
        )


def close_departed(ev: Evaluation, watch: dict[str, Any]) -> None:
    """Read a deal that is no longer listed and close its watch with the CRM's reason."""
    subject_id = watch["subject_id"]
    try:
        decision = decide_for_stage(ev.crm.get_deal(deal_id=subject_id).stage, ev.policy)
    except NotFoundError:
        decision = Close("subject_gone")
    except IntegrationError as error:
        ev.problem(f"deal {subject_id}: CRM unreadable, its watch stays open: {error}")
        return
    if isinstance(decision, Close):  # else it entered a watched stage after the listing
        close_with_steps(ev, watch, decision.reason)


def latest_activity(ev: Evaluation, subject_id: str, since: datetime) -> datetime | None:
    """The newest e-mail, held call or held meeting of a deal after ``since``."""
    moments = [e.date_sent for e in ev.crm.list_emails(deal_id=subject_id, since=since).records]
    for listing in (
        ev.crm.list_calls(deal_id=subject_id),
        ev.crm.list_meetings(deal_id=subject_id),
    ):
        moments += [r.date_start for r in listing.records if r.status == HELD]
    fresh = [m for m in moments if m is not None and since < m <= ev.now]
    return max(fresh) if fresh else None


def reset_cadences(ev: Evaluation) -> None:
    """Plan the open steps of every deal with new activity again from the activity's day."""
    with ev.postgres.connection() as conn:
        watches = open_watches(conn)
    for watch in watches:
        since = watch["last_reset_at"] or watch["registered_at"]
        try:
            moment = latest_activity(ev, watch["subject_id"], since)
        except IntegrationError as error:
            ev.unreadable.add(watch["id"])
            ev.problem(f"deal {watch['subject_id']}: activity unreadable, no reset: {error}")
            with ev.postgres.connection() as conn:
                set_watch_error(conn, watch_id=watch["id"], error=str(error), at=ev.now)
            continue
        if watch["last_error"]:
            with ev.postgres.connection() as conn:
                set_watch_error(conn, watch_id=watch["id"], error=None, at=None)
        if moment is None:
            continue
        reset_on = local_date(moment, watch["time_zone"])
        with ev.postgres.connection() as conn, conn.transaction():
            steps = [
                PlannedStep(s["step_no"], s["offset_days"], s["due_on"])
                for s in steps_of(conn, watch["id"])
                if s["fired_at"] is None and s["skipped_at"] is None
            ]
            for step in replan_steps(reset_on, steps, ev.calendar):
                replan_step(conn, watch_id=watch["id"], step_no=step.step_no, due_on=step.due_on)
            mark_reset(conn, watch_id=watch["id"], at=moment)
        ev.counts["reset"] += 1
