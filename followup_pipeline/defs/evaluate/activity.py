"""Step 2 of ``evaluate``: reset the cadence of deals with new activity.

Activity is an e-mail, or a call or meeting that was held, after the watch's last reset (or its
registration); with ``FOLLOWUP_CLICKUP_COMPLETION_RESETS``, also a step's task that someone
completed in ClickUp (read from the list's tasks changed since the cursor, its evidence kept in
``task_completions``). A reset plans each open step again from the activity's local date, records
what the activity was (a task names the last contact), and marks the watch's tasks not closed yet
as overtaken: the salesperson followed up, so they are closed saying what happened.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

import psycopg

from followup_pipeline.defs.evaluate.ports import DealSource
from followup_pipeline.domain.cadence import replan_steps
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.engine.scope import Database, RunScope, Tally
from followup_pipeline.integrations.clickup import TaskChanges
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.espocrm_models import Call, Listing, Meeting
from followup_pipeline.store import completions, steps, watches
from followup_pipeline.store.completions import Completion
from followup_pipeline.store.steps import ContactKind
from followup_pipeline.store.watches import Watch

#: Calls and meetings count as activity once held; planned ones are not activity yet.
HELD = "Held"
#: How far ahead of this machine's clock an activity's date may be and still count (as now).
CLOCK_SKEW = timedelta(hours=1)


class Activity(NamedTuple):
    """One piece of a deal's activity: when, and what it was."""

    at: datetime
    kind: ContactKind


class TaskChangeSource(Protocol):
    """The task board, read for the tasks people completed."""

    def list_tasks_changed_since(self, *, since: datetime) -> TaskChanges:
        """Every task of the list updated after ``since``, closed ones included."""
        ...


@dataclass(frozen=True)
class Completed:
    """A step's task that someone completed in ClickUp, not applied yet: its evidence to record
    and the deal whose activity it is."""

    subject_id: str
    task_id: str
    watch_id: int
    step_no: int
    status: str
    at: datetime

    def evidence(self, *, counted: bool) -> Completion:
        """What is recorded of it; ``counted`` when it is new activity for its watch."""
        return Completion(self.task_id, self.watch_id, self.step_no, self.status, self.at, counted)


@dataclass(frozen=True)
class CompletedRead:
    """What one read of ClickUp's task list found: the completions to apply, what to count and
    report, and whether it was read at all (else the cursor stays)."""

    found: list[Completed]
    counts: dict[str, int]
    problems: list[str]
    complete: bool = True


@dataclass
class Resets:
    """What resetting found: its tally, and the watches whose activity could not be read (their
    due steps wait: a reset might have postponed them)."""

    tally: Tally
    unreadable: set[int] = field(default_factory=set)
    #: Whether all activity was read (else the cursor stays where it was).
    complete: bool = True
    #: Why the activity could not be read (the vendor's error), when it could not.
    error: IntegrationError | None = None


class CadenceResetter:
    """Reads what activity changed since the cursor, in three listings, and plans the open
    steps of each deal with new activity again."""

    def __init__(
        self,
        run: RunScope,
        db: Database,
        crm: DealSource,
        calendar: BusinessCalendar,
        *,
        board: TaskChangeSource | None = None,
    ) -> None:
        self.db = db
        self.crm = crm
        self.calendar = calendar
        self.now = run.now
        self.run_id = run.run_id
        self.log = run.log
        #: Where completed tasks are read (``FOLLOWUP_CLICKUP_COMPLETION_RESETS``); None: not.
        self.board = board
        #: Activity records of the last listings that broke their schema.
        self.invalid: list[str] = []

    def activity_since(self, since: datetime) -> dict[str, list[Activity]]:
        """The activity per deal, read in three listings of what changed after ``since``:
        e-mails created, calls and meetings modified (held late counts) since."""
        moments: dict[str, list[Activity]] = {}
        emails = self.crm.list_emails_since(since=since)
        self.invalid = [str(e) for e in emails.invalid]
        for email in emails.records:
            if email.parent_id and email.date_sent is not None:
                moments.setdefault(email.parent_id, []).append(Activity(email.date_sent, "email"))
        held: list[tuple[ContactKind, Listing[Call] | Listing[Meeting]]] = [
            ("call", self.crm.list_calls_since(since=since)),
            ("meeting", self.crm.list_meetings_since(since=since)),
        ]
        for kind, listing in held:
            self.invalid += [str(e) for e in listing.invalid]
            for record in listing.records:
                if record.parent_id and record.status == HELD and record.date_start is not None:
                    found = Activity(record.date_start, kind)
                    moments.setdefault(record.parent_id, []).append(found)
        return moments

    def unreadable(self, error: IntegrationError) -> Resets:
        """No activity can be read this run (``error``; the run's first read of the CRM failed,
        or this one): no reset, and every open watch says why its steps wait."""
        resets = Resets(Tally(self.log))
        resets.complete = False
        resets.error = error
        resets.tally.problem(f"activity unreadable, no reset this run: {error}", error)
        with self.db.connection() as conn:  # each watch says why its steps wait
            resets.unreadable = watches.set_open_watch_errors(conn, error=str(error), at=self.now)
        return resets

    def run_changes(self, since: datetime | None) -> Resets:
        """Reset every open deal with new activity, read as what changed after ``since`` (the
        cursor; None: since the oldest open watch's last reset), not per deal. The database is
        asked only for the watches of deals with activity: the cost follows the changes."""
        resets = Resets(Tally(self.log))
        with self.db.connection() as conn:
            oldest = watches.oldest_open_activity_start(conn)
        if oldest is None:
            return resets  # no watch is open: no activity to read
        start = since or oldest
        try:
            moments = self.activity_since(start)
        except IntegrationError as error:
            return self.unreadable(error)
        resets.tally.count("crm_activity_changed", sum(len(m) for m in moments.values()))
        for broken in self.invalid:
            resets.tally.problem(f"CRM activity record breaks its schema, skipped: {broken}")
        done: list[Completed] = []
        if self.board is not None:
            read = self.completed_since(start)
            done = read.found
            resets.complete = resets.complete and read.complete
            for name, n in read.counts.items():
                resets.tally.count(name, n)
            for problem in read.problems:
                resets.tally.problem(problem)
        for found in done:
            moments.setdefault(found.subject_id, []).append(Activity(found.at, "task"))
        with self.db.connection() as conn:
            watches.clear_open_watch_errors(conn)
            touched = watches.open_watches_of(conn, list(moments))
        # Dated a little after now (a sender's clock ahead): as of now, not dropped (the next run
        # would not list it again); dated further ahead, it is not activity yet.
        ahead = self.now + CLOCK_SKEW
        for watch in touched:
            mine = moments.get(watch.subject_id, [])
            fresh = [
                Activity(min(a.at, self.now), a.kind)
                for a in mine
                if watch.active_since < a.at <= ahead
            ]
            evidence = [
                c.evidence(counted=watch.active_since < c.at <= ahead)
                for c in done
                if c.watch_id == watch.id
            ]
            if fresh:
                overtaken = self._reset(watch, max(fresh), evidence)
                resets.tally.count("reset")
                if overtaken:
                    resets.tally.count("tasks_overtaken", overtaken)
            elif evidence:  # completed before the last reset: kept, and never read again
                with self.db.connection() as conn, conn.transaction():
                    self._record(conn, evidence)
        return resets

    def completed_since(self, since: datetime) -> CompletedRead:
        """The tasks completed in ClickUp among those changed after ``since`` that are the
        salesperson's follow-up: a step's task of an open watch, not closed by Followup, not
        overtaken, not recorded before. ClickUp unreadable: a problem, none this run, and the
        cursor stays (the next run reads them); the rest of the run goes on."""
        assert self.board is not None
        try:
            changes = self.board.list_tasks_changed_since(since=since)
        except IntegrationError as error:
            problem = f"ClickUp tasks unreadable, no completion read this run: {error}"
            return CompletedRead([], {}, [problem], complete=False)
        problems = [f"ClickUp task breaks its schema, skipped: {b}" for b in changes.invalid]
        completed = {task.id: task for task in changes.tasks if task.completed}
        with self.db.connection() as conn:
            found = completions.steps_of_completed_tasks(conn, list(completed))
        counts = {
            "clickup_tasks_changed": len(changes.tasks),
            "tasks_completed_in_clickup": len(found),
        }
        applied = [
            Completed(
                subject_id=step.subject_id,
                task_id=step.task_id,
                watch_id=step.watch_id,
                step_no=step.step_no,
                status=completed[step.task_id].status,
                at=completed[step.task_id].completed_at,
            )
            for step in found
        ]
        return CompletedRead(applied, counts, problems)

    def _record(self, conn: psycopg.Connection[Any], evidence: Sequence[Completion]) -> None:
        """Record the completions read (each task once) in the caller's transaction."""
        completions.record_completions(conn, evidence, read_at=self.now, run_id=self.run_id)

    def _reset(self, watch: Watch, latest: Activity, evidence: Sequence[Completion] = ()) -> int:
        """Plan the open steps again from ``latest``, record what it was (and the completions
        read in ClickUp, ``evidence``), and mark the watch's tasks not closed yet as overtaken
        by it (one transaction); how many were marked."""
        reset_on = local_date(latest.at, watch.time_zone)
        with self.db.connection() as conn, conn.transaction():
            self._record(conn, evidence)
            planned = [s.planned() for s in steps.steps_of(conn, watch.id) if s.open]
            for step in replan_steps(reset_on, planned, self.calendar):
                steps.replan_step(conn, watch_id=watch.id, step_no=step.step_no, due_on=step.due_on)
            watches.mark_reset(conn, watch_id=watch.id, at=latest.at)
            steps.record_contact(conn, watch_id=watch.id, kind=latest.kind)
            marked = steps.mark_overtaken(conn, watch_id=watch.id, at=latest.at, kind=latest.kind)
        return len(marked)
