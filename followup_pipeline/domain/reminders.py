"""Learning reminders as records, not timers (docs/architecture.md §10): a quiz assigned to a
learner with a due date gets reminder records, each a fixed local time in the tenant's zone
stored as a UTC instant plus the zone's name; what is due is decided from those records and the
business records (completions, opt-outs), never from timer history. Pure code.

The plan (per tenant): ``before_days`` calendar days before the due day, the due day itself, and
``after_business_days`` business days after it (the tenant's calendar), each at ``at`` local.
A local time that a DST change skips (02:30 on the spring-forward night) is moved forward by the
gap; one that it repeats takes the first of the two instants (``fold=0``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from followup_pipeline.domain.calendar import BusinessCalendar

ActionType = Literal["before_due", "due_day", "overdue"]
#: The order of a plan's reminders: a later one overtakes an earlier one of the same assignment.
ACTION_ORDER: dict[str, int] = {"before_due": 0, "due_day": 1, "overdue": 2}


@dataclass(frozen=True)
class ReminderPlan:
    """When a tenant's learners are reminded of a quiz's due date."""

    before_days: int = 2
    after_business_days: int = 3
    at: time = time(9, 0)


@dataclass(frozen=True)
class PlannedReminder:
    """One reminder of one assignment: its type, its instant (UTC) and its local day."""

    action_type: ActionType
    due_at: datetime
    local_day: date


def local_instant(day: date, at: time, zone: str) -> datetime:
    """``at`` on ``day`` in ``zone``, as a UTC instant: a skipped local time (spring forward)
    moves forward by the gap, a repeated one (fall back) is its first occurrence."""
    # fold=0: a repeated time is its first occurrence; a skipped one is read with the offset
    # before the change, which lands the gap's length later (02:30 -> 03:30 CEST).
    local = datetime.combine(day, at).replace(tzinfo=ZoneInfo(zone), fold=0)
    return local.astimezone(UTC)


def plan_reminders(
    due: datetime, *, zone: str, plan: ReminderPlan, calendar: BusinessCalendar
) -> list[PlannedReminder]:
    """The reminders of an assignment due at ``due`` (an instant): its local due day in
    ``zone`` decides the days."""
    due_day = due.astimezone(ZoneInfo(zone)).date()
    days: list[tuple[ActionType, date]] = [
        ("before_due", due_day - timedelta(days=plan.before_days)),
        ("due_day", due_day),
        ("overdue", calendar.add_business_days(due_day, plan.after_business_days)),
    ]
    return [
        PlannedReminder(kind, local_instant(day, plan.at, zone), day)
        for kind, day in days
        if plan.before_days > 0 or kind != "before_due"
    ]


def reminder_key(
    tenant: str, learner: int, assignment: int, action_type: str, local_day: date
) -> str:
    """The reminder's idempotency key: one reminder is one action, whoever runs it."""
    return f"lms:{tenant}:{learner}:{assignment}:{action_type}:{local_day.isoformat()}"


@dataclass(frozen=True)
class DueReminder:
    """A reminder record that fell due and has not been settled."""

    id: int
    assignment: tuple[str, int, int]
    action_type: str
    due_at: datetime


def latest_of_each(
    due: Iterable[DueReminder],
) -> tuple[list[DueReminder], list[DueReminder]]:
    """After an outage, each assignment's latest due reminder goes out and the earlier ones are
    overtaken: (to send, overtaken)."""
    latest: dict[tuple[str, int, int], DueReminder] = {}
    overtaken: list[DueReminder] = []
    for reminder in sorted(due, key=lambda r: (r.due_at, ACTION_ORDER.get(r.action_type, 0))):
        before = latest.get(reminder.assignment)
        if before is not None:
            overtaken.append(before)
        latest[reminder.assignment] = reminder
    return list(latest.values()), overtaken


def in_business_hours(
    now: datetime, *, zone: str, calendar: BusinessCalendar, hours: Sequence[int]
) -> bool:
    """Whether ``now`` is within ``hours`` (start, end) of a business day in ``zone``."""
    local = now.astimezone(ZoneInfo(zone))
    start, end = hours
    return calendar.is_business_day(local.date()) and start <= local.hour < end
