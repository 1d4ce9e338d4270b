"""What the reports show, as data: the lines of the morning list and the figures of the Friday
overview, and how a salesperson's own list is cut out of the team's. Pure code, no I/O; rendered
by ``reports.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from decimal import Decimal


@dataclass(frozen=True)
class StepLine:
    """A step of a deal on the morning list: due today (``section`` ``today``: due on the day, or
    its task created that day) or overdue and still waiting (``reason`` says why). Names are the
    CRM's, kept on the watch; ``contact_at`` is the last contact (None: none since
    ``started_on``)."""

    deal_id: str
    deal_name: str
    account_name: str | None
    owner_id: str | None
    owner: str | None
    stage: str
    amount: Decimal | float | None
    currency: str | None
    step_no: int
    step_count: int
    due_on: date
    section: str
    crm_url: str | None
    task_url: str | None
    contact_kind: str | None
    contact_at: datetime | None
    started_on: date
    summary_line1: str | None = None
    summary_line2: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class SummaryLine:
    """A deal's new two-line summary."""

    deal_id: str
    deal_name: str
    owner_id: str | None
    owner: str | None
    line1: str
    line2: str
    crm_url: str | None
    written_at: datetime | None = None


@dataclass(frozen=True)
class ClosedLine:
    """A deal no longer followed up since the last list, and why."""

    deal_id: str
    deal_name: str
    owner_id: str | None
    owner: str | None
    reason: str
    closed_at: datetime


@dataclass(frozen=True)
class Health:
    """The machine's health, for the team's list: cases waiting for the operations team, the
    last successful check against the CRM, the oldest message waiting at the intake."""

    dead_letters: int
    last_evaluate_ok: datetime | None
    oldest_pending_s: float | None


@dataclass(frozen=True)
class MorningData:
    """Everything the morning list of ``day`` shows; ``person`` names the salesperson of a
    personal list (None: the team's list, with the health of the machine). What changed is shown
    since each list's own last send: ``since`` for the team's, ``since_by_owner`` for each
    salesperson's (None: all of ``summaries`` and ``closed``)."""

    day: date
    time_zone: str
    steps: Sequence[StepLine]
    summaries: Sequence[SummaryLine]
    closed: Sequence[ClosedLine]
    review_open: int
    health: Health
    late: bool = False
    preview: bool = False
    person: str | None = None
    since: datetime | None = None
    since_by_owner: Mapping[str, datetime] = field(default_factory=dict)

    @property
    def due_today(self) -> list[StepLine]:
        """The steps due today, and those whose task was created today."""
        return [s for s in self.steps if s.section == "today"]

    @property
    def overdue(self) -> list[StepLine]:
        """The steps due before today that still wait for their task."""
        return [s for s in self.steps if s.section == "overdue"]


def has_work(data: MorningData) -> bool:
    """Whether the list has anything due or overdue: a list without is not sent."""
    return bool(data.steps)


def personal(data: MorningData, owner_id: str, person: str) -> MorningData:
    """The morning list of one salesperson: their deals only, what changed since their own last
    list, without the machine's health (``person``: how they are greeted; empty, not by name)."""
    return replace(
        data,
        steps=[s for s in data.steps if s.owner_id == owner_id],
        summaries=[s for s in data.summaries if s.owner_id == owner_id],
        closed=[c for c in data.closed if c.owner_id == owner_id],
        review_open=0,
        person=person,
        since=data.since_by_owner.get(owner_id, data.since),
    )


def after(moment: datetime | None, since: datetime | None) -> bool:
    """Whether ``moment`` is news for a list last sent at ``since`` (None: everything is)."""
    return since is None or moment is None or moment > since


@dataclass(frozen=True)
class StageLine:
    """Deals followed up in one stage: how many, and their average and longest time in days
    (whole days, so that the average never exceeds the longest)."""

    stage: str
    count: int
    average_age_days: float
    oldest_age_days: int


@dataclass(frozen=True)
class WeeklyData:
    """Everything the Friday overview of the week ``start``..``end`` shows; ``tasks_per_day``
    holds the week's business days (and any other day a task was created on)."""

    start: date
    end: date
    time_zone: str
    fired: int
    suppressed: dict[str, int]
    opened: int
    closed: dict[str, int]
    open_by_stage: Sequence[StageLine]
    failed_runs: int
    dead_letters: int
    tasks_per_day: dict[date, int]
    late: bool = False
    preview: bool = False


@dataclass(frozen=True)
class Rendered:
    """A mail: its subject, HTML and plain text."""

    subject: str
    html: str
    text: str
