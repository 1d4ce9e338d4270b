"""Why a deal has, or has no, task today: the store's facts in plain words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol

from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.tasks import CLOSE_WORDS


class Watch(Protocol):
    """What an explanation reads of a watch (the store's row has it)."""

    @property
    def id(self) -> int: ...
    @property
    def subject_name(self) -> str: ...
    @property
    def time_zone(self) -> str: ...
    @property
    def paused_at(self) -> datetime | None: ...
    @property
    def closed_at(self) -> datetime | None: ...
    @property
    def closed_reason(self) -> str | None: ...
    @property
    def last_error(self) -> str | None: ...


class Step(Protocol):
    """What an explanation reads of a watch's step (the store's row has it)."""

    @property
    def step_no(self) -> int: ...
    @property
    def due_on(self) -> date: ...
    @property
    def fired_at(self) -> datetime | None: ...
    @property
    def task_ref(self) -> str | None: ...
    @property
    def skipped_at(self) -> datetime | None: ...
    @property
    def skip_reason(self) -> str | None: ...


class Action(Protocol):
    """What an explanation reads of a step's ledger action (the store's row has it)."""

    @property
    def outcome(self) -> str: ...
    @property
    def last_error(self) -> str | None: ...


SKIP_WORDS = {
    "deal_closed": "the deal was no longer open in a watched stage",
    "superseded": "a later step was due at the same time, and only the latest fires",
    "paused": "the watch was paused",
    "decided": "it was late while a vendor was away and a person closed it on the list of "
    "work (followup work list --kind step --state closed)",
}


def explain(
    *,
    deal_id: str,
    watch: Watch | None,
    steps: Sequence[Step],
    actions: Mapping[int, Action],
    today: date,
    watched_stages: Sequence[str],
    crm: CrmAnswer | None = None,
) -> list[str]:
    """A headline (the answer for today) followed by one line per step.

    ``actions`` maps step numbers to the ledger rows of their tasks; ``crm`` is what the CRM
    said of a deal that has no watch.
    """
    if watch is None:
        return [unseen(deal_id, crm, watched_stages)]
    name = f"deal {deal_id} ({watch.subject_name}), watch {watch.id}"
    lines = [f"{name}: {_headline(watch, steps, actions, today)}"]
    total = len(steps)
    for step in steps:
        line = _step_line(step, actions, today, watch.time_zone)
        lines.append(f"  step {step.step_no} of {total}: {line}")
    return lines


@dataclass(frozen=True)
class CrmAnswer:
    """What the CRM says of a deal without a watch: found (name, stage), not found, or an error;
    and when the next ``evaluate`` runs."""

    found: bool
    name: str = ""
    stage: str = ""
    error: str | None = None
    next_evaluate: datetime | None = None


def unseen(deal_id: str, crm: CrmAnswer | None, watched_stages: Sequence[str]) -> str:
    """The answer for a deal that has no watch, with what the CRM says of it."""
    stages = ", ".join(watched_stages)
    never = f"deal {deal_id}: no task — Followup has never seen it in a watched stage ({stages})"
    if crm is None:
        return f"{never}."
    if crm.error is not None:
        return f"{never}; the CRM could not be asked about it: {crm.error}"
    if not crm.found:
        return f"deal {deal_id}: no such deal in the CRM."
    if crm.stage in watched_stages:
        when = f"{crm.next_evaluate:%a %Y-%m-%d %H:%M}" if crm.next_evaluate else "soon"
        return (
            f"deal {deal_id} ({crm.name}): no task yet — not seen yet: the next evaluate at "
            f"{when} will open it (stage {crm.stage!r})."
        )
    return f"{never}; it is in stage {crm.stage!r} now."


def _headline(
    watch: Watch,
    steps: Sequence[Step],
    actions: Mapping[int, Action],
    today: date,
) -> str:
    if watch.closed_at is not None:
        reason = str(watch.closed_reason)
        note = (
            " It is not reopened while the deal stays in this stage; another watched stage opens"
            " a new watch."
            if reason == "exhausted"
            else ""
        )
        return (
            f"no task — the watch closed on {_day(watch.closed_at, watch.time_zone)} because "
            f"{CLOSE_WORDS.get(reason, reason)}.{note}"
        )
    if watch.paused_at is not None:
        return (
            f"no task — paused since {_day(watch.paused_at, watch.time_zone)}; due steps are "
            "skipped "
            "until an operator resumes it."
        )
    zone = watch.time_zone
    fired_today = [s for s in steps if s.fired_at is not None and _day(s.fired_at, zone) == today]
    if fired_today:
        step = fired_today[-1]
        return f"task {step.task_ref} — step {step.step_no} fired today."
    # A CRM error holds back a due step only: a step not due yet says when it is due.
    open_steps = [s for s in steps if s.fired_at is None and s.skipped_at is None]
    due = [s for s in open_steps if s.due_on <= today]
    if due:
        step = due[-1]
        if watch.last_error:
            return (
                f"no task yet — step {step.step_no} is due, waiting on a CRM error: "
                f"{watch.last_error}"
            )
        action = actions.get(step.step_no)
        if action is not None and action.outcome in ("failed", "unknown"):
            return (
                f"no task yet — step {step.step_no} is due, its last attempt ended "
                f"{action.outcome}: {action.last_error}. The next evaluate run retries."
            )
        return f"no task yet — step {step.step_no} is due; the next evaluate run fires it."
    error = watch.last_error
    crm = f" (meanwhile the CRM's last answer was an error: {error})" if error else ""
    if open_steps:
        step = open_steps[0]
        return f"no task today — step {step.step_no} is not due until {step.due_on}{crm}."
    return (
        "no task today — every step is done; the watch closes as exhausted when it goes "
        f"quiet{crm}."
    )


def _step_line(step: Step, actions: Mapping[int, Action], today: date, zone: str) -> str:
    if step.fired_at is not None:
        return f"fired on {_day(step.fired_at, zone)} as task {step.task_ref}."
    if step.skipped_at is not None:
        reason = str(step.skip_reason)
        day = _day(step.skipped_at, zone)
        return f"skipped on {day} because {SKIP_WORDS.get(reason, reason)}."
    action = actions.get(step.step_no)
    if action is not None and action.outcome in ("failed", "unknown"):
        return f"due {step.due_on}; last attempt {action.outcome}: {action.last_error}"
    when = "due since" if step.due_on <= today else "due on"
    return f"{when} {step.due_on}."


def _day(instant: datetime, zone: str = "UTC") -> date:
    return local_date(instant, zone)
