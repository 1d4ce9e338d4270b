"""The account of every due action (docs/architecture.md §13): for a window, what was due and how
each ended: done, suppressed with its reason, waiting on the list of work with its owner, in
flight, not late yet, or **unaccounted** (due, past its kind's grace, and none of those). The
promise is that the last is always zero.

Pure: the rows come from the store (``store/account.py``), the engine adds them up
(``engine/account.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_to_utc
from followup_pipeline.domain.steps import DRY_RUN_REF, task_key
from followup_pipeline.domain.work import action_pipeline, event_pipeline

Ending = Literal["done", "suppressed", "waiting", "in_flight", "not_late", "unaccounted"]
ENDINGS: tuple[Ending, ...] = (
    "done",
    "suppressed",
    "waiting",
    "in_flight",
    "not_late",
    "unaccounted",
)

#: How long after it fell due each kind may stay undone before it is unaccounted (and, where a
#: vendor keeps it from going out, before it goes on the list of work with its owner). Each is
#: a few runs of the job that does it: a vendor away for a minute costs one run, never an alert.
GRACE: dict[str, timedelta] = {
    # evaluate runs every hour of a business day; a step is due from its working day's start.
    "step": timedelta(hours=3),
    "task": timedelta(hours=3),
    "close_task": timedelta(hours=3),
    "task_update": timedelta(hours=3),
    # A report is retried by its next runs and by hand (docs/operations.md).
    "report": timedelta(hours=2),
    # An unsent alert is tried again after 15 min, 30 min, 1 h, 2 h, then every 4 h.
    "alert": timedelta(hours=6),
    # An event is retried with backoff; 15 minutes pending is already an alert.
    "event": timedelta(hours=1),
    "crm_lead": timedelta(hours=1),
    # lms_reminders runs every quarter hour, in the tenant's business hours.
    "reminder": timedelta(hours=2),
    # Each tenant's certificates are reconciled once an hour.
    "certificate": timedelta(hours=3),
    "publication": timedelta(hours=1),
}


@dataclass(frozen=True)
class Entry:
    """One due action as the account sees it."""

    pipeline: str
    kind: str
    name: str
    due_at: datetime
    ending: Ending
    #: The suppression's reason, or the owner an item waits with.
    detail: str | None = None


def late_ending(kind: str, due_at: datetime, now: datetime) -> Ending:
    """An action that is neither done, suppressed, waiting nor in flight: ``not_late`` within
    its kind's grace, else ``unaccounted``."""
    return "not_late" if now - due_at <= GRACE[kind] else "unaccounted"


def ledger_ending(
    kind: str, outcome: str, reason: str | None, owner: str | None, due_at: datetime,
    now: datetime,
) -> tuple[Ending, str | None]:  # fmt: skip
    """How an action of the ledger (or a record shaped like it) stands: its ending and detail."""
    if outcome in ("accepted", "confirmed", "issued", "published", "sent"):
        return "done", None
    if outcome in ("suppressed", "superseded"):
        return "suppressed", reason or outcome
    if owner is not None:
        return "waiting", owner
    if outcome == "attempted":
        return "in_flight", None
    return late_ending(kind, due_at, now), None


@dataclass
class Line:
    """One pipeline's kind in the account: how many of each ending, and the details."""

    pipeline: str
    kind: str
    endings: Counter[str] = field(default_factory=Counter)
    suppressed: Counter[str] = field(default_factory=Counter)
    waiting: Counter[str] = field(default_factory=Counter)

    @property
    def due(self) -> int:
        return sum(self.endings.values())


@dataclass
class Account:
    """The account of a window: a line per pipeline and kind, and what is unaccounted by name."""

    since: datetime
    until: datetime
    lines: dict[tuple[str, str], Line] = field(default_factory=dict)
    unaccounted: list[Entry] = field(default_factory=list)

    def add(self, entry: Entry) -> None:
        line = self.lines.setdefault((entry.pipeline, entry.kind), Line(entry.pipeline, entry.kind))
        line.endings[entry.ending] += 1
        if entry.ending == "suppressed":
            line.suppressed[entry.detail or "no reason"] += 1
        elif entry.ending == "waiting":
            line.waiting[entry.detail or "nobody"] += 1
        elif entry.ending == "unaccounted":
            self.unaccounted.append(entry)

    def total(self, ending: Ending) -> int:
        return sum(line.endings[ending] for line in self.lines.values())

    def sorted_lines(self) -> list[Line]:
        return [self.lines[key] for key in sorted(self.lines)]


#: A row of one of the account's queries (``store/queries/account.sql``).
Rows = list[dict[str, Any]]


def step_days(since: datetime, until: datetime) -> tuple[date, date]:
    """The days whose steps may be due in the window (a day each side for the zones)."""
    return (since - timedelta(days=1)).date(), (until + timedelta(days=1)).date()


@dataclass(frozen=True)
class AccountRows:
    """What the account's queries read for a window."""

    steps: Rows
    actions: Rows
    events: Rows
    reminders: Rows
    certificates: Rows
    publications: Rows


def _steps(rows: Rows, opens: time, since: datetime, until: datetime) -> Iterator[Entry]:
    """Each step due in the window: from its working day's start (``opens``) in its deal's zone,
    and on a closed watch only if that came before the close (a step planned beyond it was
    never due)."""
    for row in rows:
        due_at = local_to_utc(row["due_on"], opens, row["time_zone"])
        closed = row["closed_at"]
        if not since <= due_at <= until or (closed is not None and due_at > closed):
            continue
        name = task_key(row["watch_id"], row["step_no"])
        ending: Ending
        detail: str | None = None
        if row["task_ref"] == DRY_RUN_REF:
            ending, detail = "suppressed", "dry_run"
        elif row["fired_at"] is not None:
            ending = "done"
        elif row["skip_reason"] is not None:
            ending, detail = "suppressed", str(row["skip_reason"])
        elif row["outcome"] == "suppressed":
            ending, detail = "suppressed", str(row["action_reason"])
        elif row["owner"] is not None:
            ending, detail = "waiting", str(row["owner"])
        elif row["outcome"] == "attempted":
            ending = "in_flight"
        else:  # late from its due moment, or from its watch's opening if that came after
            ending = late_ending("step", max(due_at, row["registered_at"]), until)
        yield Entry("deal_followup", "step", name, due_at, ending, detail)


def _actions(rows: Rows, until: datetime) -> Iterator[Entry]:
    for row in rows:
        kind, name = str(row["kind"]), str(row["name"])
        ending, detail = ledger_ending(
            kind, row["outcome"], row["reason"], row["owner"], row["late_from"], until
        )
        if ending in ("not_late", "unaccounted") and row["closed_how"] == "decided":
            ending, detail = "suppressed", "decided"  # a person closed its item (its event's)
        yield Entry(action_pipeline(kind, name), kind, name, row["due_at"], ending, detail)


def _events(rows: Rows, until: datetime) -> Iterator[Entry]:
    for row in rows:
        ending: Ending
        detail: str | None = None
        status = row["status"]
        if status == "done":
            ending = "done"
        elif status == "unhandled":
            ending, detail = "suppressed", "unhandled"
        elif status == "dead" and row["item_state"] in ("open", "acknowledged"):
            ending, detail = "waiting", str(row["owner"])
        elif status == "dead" and row["closed_how"] == "decided":
            ending, detail = "suppressed", "decided"
        else:  # pending (retried with backoff), or dead with no item yet
            ending = late_ending("event", row["received_at"], until)
        name = f"event:{row['id']}"
        pipeline = event_pipeline(str(row["source"]))
        yield Entry(pipeline, "event", name, row["received_at"], ending, detail)


def next_open(
    moment: datetime, *, zone: str, hours: tuple[int, int], calendar: BusinessCalendar
) -> datetime:
    """``moment``, or the start of the next business hours after it in ``zone`` when it falls
    outside them: a reminder due on a Saturday is not late until Monday's hours have run."""
    local = moment.astimezone(ZoneInfo(zone))
    start, end = hours
    day = local.date()
    for _ in range(30):
        if calendar.is_business_day(day):
            opens = local_to_utc(day, time(start), zone)
            closes = local_to_utc(day, time(end - 1, 59, 59), zone)
            if moment <= closes:
                return max(moment, opens)
        day += timedelta(days=1)
    return moment


def _learning(read: AccountRows, until: datetime) -> Iterator[Entry]:
    calendars: dict[tuple[str, str | None], BusinessCalendar] = {}
    sources = (
        ("reminder", read.reminders),
        ("certificate", read.certificates),
        ("publication", read.publications),
    )
    for kind, rows in sources:
        for row in rows:
            outcome = str(row["outcome"])
            if kind == "publication" and outcome == "waiting" and row["owner"] is None:
                outcome = "planned"  # not approved yet: waits with its owner once parked
            due_at: datetime = row["late_from"]  # its due moment, or when it came to be
            if kind == "reminder":  # sent only in the academy's business hours
                where = (str(row["holiday_country"]), row["holiday_subdivision"])
                calendar = calendars.setdefault(where, BusinessCalendar(*where))
                hours = (int(row["hours_start"]), int(row["hours_end"]))
                due_at = next_open(due_at, zone=row["time_zone"], hours=hours, calendar=calendar)
            ending, detail = ledger_ending(
                kind, outcome, row["reason"], row["owner"], due_at, until
            )
            if ending in ("not_late", "unaccounted") and row["mode"] == "off":
                ending, detail = "suppressed", "tenant_off"  # its academy is switched off
            yield Entry("learning", kind, str(row["name"]), row["due_at"], ending, detail)


def build(
    read: AccountRows,
    *,
    opens: time,
    since: datetime,
    until: datetime,
    pipeline: str | None = None,
) -> Account:
    """The account of the rows ``read`` for the window (of ``pipeline`` only, if given); a step
    is due from ``opens`` on its day (``FOLLOWUP_BUSINESS_HOURS_START``)."""
    result = Account(since, until)
    entries = [
        *_steps(read.steps, opens, since, until),
        *_actions(read.actions, until),
        *_events(read.events, until),
        *_learning(read, until),
    ]
    for entry in sorted(entries, key=lambda e: (e.pipeline, e.kind, e.due_at, e.name)):
        if pipeline is None or entry.pipeline == pipeline:
            result.add(entry)
    return result
