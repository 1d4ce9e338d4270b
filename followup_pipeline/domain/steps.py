"""Which steps of a watch fire now, which are superseded, and when a watch is exhausted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

from followup_pipeline.domain.calendar import BusinessCalendar

#: What a step fired in a dry run records as its task: no task exists.
DRY_RUN_REF = "dry-run"


def task_key(watch_id: int, step_no: int) -> str:
    """The idempotency key of a step's task."""
    return f"task:{watch_id}:{step_no}"


def step_of_key(key: str) -> tuple[int, int]:
    """The watch and step a task's key names (``task:<watch>:<step>``); ``ValueError`` else."""
    prefix, watch_id, step_no = key.split(":")
    if prefix != "task":
        raise ValueError(f"{key!r} is not a step's task key (task:<watch>:<step>)")
    return int(watch_id), int(step_no)


@dataclass(frozen=True)
class StepState:
    """A step as the store knows it."""

    step_no: int
    offset_days: int
    due_on: date
    fired_on: date | None = None
    skipped: bool = False

    @property
    def open(self) -> bool:
        """Neither fired nor skipped."""
        return self.fired_on is None and not self.skipped


@dataclass(frozen=True)
class DueSelection:
    """The step to fire now (the latest due), and the older due ones it supersedes."""

    fire: int | None = None
    supersede: list[int] = field(default_factory=list)


def select_due(steps: Sequence[StepState], today: date) -> DueSelection:
    """Catch-up from the records: of the open steps due by ``today``, only the latest fires."""
    due = sorted(s.step_no for s in steps if s.open and s.due_on <= today)
    if not due:
        return DueSelection()
    return DueSelection(fire=due[-1], supersede=due[:-1])


def is_exhausted(
    steps: Sequence[StepState],
    today: date,
    *,
    exhaust_after: int,
    calendar: BusinessCalendar,
    last_reset_on: date | None = None,
) -> bool:
    """The last step fired and ``exhaust_after`` business days passed without a reset."""
    if not steps:
        return False
    last = max(steps, key=lambda s: s.step_no)
    if last.fired_on is None or any(s.open for s in steps):
        return False
    since = max(last.fired_on, last_reset_on) if last_reset_on else last.fired_on
    return calendar.business_days_between(since, today) >= exhaust_after
