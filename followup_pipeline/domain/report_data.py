"""What the reports show, as data: the lines of the morning list and the figures of the Friday
overview, and how a salesperson's own list is cut out of the team's. Pure code, no I/O; rendered
by ``reports.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from decimal import Decimal

from followup_pipeline.domain.report_deals import WeekDeals


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
    last run that read the CRM in full, the oldest message waiting at the intake, and since when
    the CRM is unreachable (None: the latest run read it)."""

    dead_letters: int
    last_evaluate_ok: datetime | None
    oldest_pending_s: float | None
    crm_unreachable_since: datetime | None = None
    #: How the latest runs fell short since then: ``down`` (unreachable), ``partial`` (not
    #: read in full), ``failed`` (the runs failed).
    crm_state: str | None = None


@dataclass(frozen=True)
class CrmReading:
    """What ``evaluate``'s runs say of the CRM: when the last one that read it in full ended,
    and since when it is unreachable (None: the latest read it)."""

    last_full: datetime | None
    unreachable_since: datetime | None
    #: How the latest runs fell short (``down``, ``partial``, ``failed``; None: they did not).
    how: str | None = None


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


#: Where a lead event stopped, by the step its dead-letter record names (``0:enrich``): the
#: steps of ``docs/architecture.md`` §9, and the CRM write after them.
LEAD_STEPS = {
    "normalise": "normalise",
    "enrich": "enrich",
    "classify": "classify",
    "crm": "crm",
    "crm_upsert": "crm",
}


def lead_step(step: str | None) -> str:
    """The lead intake's step a dead event stopped at (``0:classify`` → ``classify``); any
    other (the worker's own ``source``, ``event``, ``worker_died``, none) is ``other``."""
    return LEAD_STEPS.get((step or "").rpartition(":")[2], "other")


def crm_state(outcome: str, reason: str | None) -> str:
    """What a ``crm_lead`` action of the ledger means for the overview: ``written`` (the CRM
    took it), ``shadow`` (shadow mode or a dry run: recorded, not written), ``not_yet`` (on its
    way, retried or failed so far), ``left_out`` (suppressed for another reason)."""
    if outcome in ("accepted", "confirmed"):
        return "written"
    if outcome == "suppressed":
        return "shadow" if reason in ("shadow", "dry_run") else "left_out"
    return "not_yet"


@dataclass(frozen=True)
class LeadCount:
    """Lead events of the week from one source with one priority (None: not classified)."""

    source: str
    priority: int | None
    n: int


@dataclass(frozen=True)
class LeadWeek:
    """The lead intake in the overview's week: the lead events received (by source and
    priority), the people first seen, the ``crm_lead`` actions created (by outcome and reason);
    and what waits when the overview is made, of what arose before the week's end: the lead
    events whose classification waits for a review, and those that stopped for the operations
    team (dead letters, by the step they stopped at). ``ever``: a lead was taken in before the
    week's end."""

    received: Sequence[LeadCount]
    new_people: int
    crm: Mapping[tuple[str, str | None], int]
    in_review: int
    stuck: Mapping[str | None, int]
    ever: bool

    @property
    def total(self) -> int:
        return sum(c.n for c in self.received)

    @property
    def by_source(self) -> dict[str, int]:
        """The events by source, in the order they came (the sources' order)."""
        found: dict[str, int] = {}
        for c in self.received:
            found[c.source] = found.get(c.source, 0) + c.n
        return found

    @property
    def by_priority(self) -> dict[int | None, int]:
        """The events by priority, 1 to 4, then those not classified (None)."""
        found: dict[int | None, int] = {}
        for c in self.received:
            found[c.priority] = found.get(c.priority, 0) + c.n
        return dict(sorted(found.items(), key=lambda item: (item[0] is None, item[0] or 0)))

    @property
    def crm_states(self) -> dict[str, int]:
        """The week's CRM writes by state (``crm_state``), each state present."""
        found = dict.fromkeys(("written", "shadow", "not_yet", "left_out"), 0)
        for (outcome, reason), n in self.crm.items():
            found[crm_state(outcome, reason)] += n
        return found

    @property
    def stuck_by_step(self) -> dict[str, int]:
        """The events waiting for the operations team by step (``lead_step``), in the steps'
        order, ``other`` last."""
        found: dict[str, int] = {}
        for step, n in self.stuck.items():
            name = lead_step(step)
            found[name] = found.get(name, 0) + n
        order = [*dict.fromkeys(LEAD_STEPS.values()), "other"]
        return {name: found[name] for name in order if name in found}

    @property
    def stuck_total(self) -> int:
        return sum(self.stuck.values())

    @property
    def quiet(self) -> bool:
        """No lead, no person, no CRM write this week, and nothing waits."""
        figures = (self.total, self.new_people, sum(self.crm.values()), self.in_review)
        return not any(figures) and not self.stuck_total


def lead_section(week: LeadWeek) -> LeadWeek | None:
    """The overview's lead section: None (left out) while lead intake has never taken in a lead
    and nothing of it waits, as for a team that has only deals; a quiet week of a team that
    takes in leads says so in one line."""
    return week if week.ever or not week.quiet else None


@dataclass(frozen=True)
class WeeklyData:
    """Everything the Friday overview of the week ``start``..``end`` shows; ``tasks_per_day``
    holds the week's business days (and any other day a task was created on), ``leads`` the
    lead intake's section."""

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
    #: The lead intake's section (``lead_section``); None: none.
    leads: LeadWeek | None = None
    #: The week's deals by name (won, lost, entered, left; value per salesperson; the quietest).
    deals: WeekDeals = field(default_factory=WeekDeals)


@dataclass(frozen=True)
class Rendered:
    """A mail: its subject, HTML and plain text."""

    subject: str
    html: str
    text: str
