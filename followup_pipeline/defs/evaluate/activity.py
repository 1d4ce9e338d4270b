"""Step 2 of ``evaluate``: reset the cadence of deals with new activity.

Activity is an e-mail, or a call or meeting that was held, after the watch's last reset (or its
registration). A reset plans each open step again from the activity's local date, records what
the activity was (a task names the last contact), and marks the watch's tasks not closed yet as
overtaken: the salesperson followed up, so they are closed saying what happened.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from followup_pipeline.defs.evaluate.ports import DealSource
from followup_pipeline.domain.cadence import replan_steps
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.engine.scope import Database, RunScope, Tally
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.espocrm_models import Call, Listing, Meeting
from followup_pipeline.store import steps, watches
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


@dataclass
class Resets:
    """What resetting found: its tally, and the watches whose activity could not be read (their
    due steps wait: a reset might have postponed them)."""

    tally: Tally
    unreadable: set[int] = field(default_factory=set)
    #: Whether all activity was read (else the cursor stays where it was).
    complete: bool = True


class CadenceResetter:
    """Reads what activity changed since the cursor, in three listings, and plans the open
    steps of each deal with new activity again."""

    def __init__(
        self, run: RunScope, db: Database, crm: DealSource, calendar: BusinessCalendar
    ) -> None:
        self.db = db
        self.crm = crm
        self.calendar = calendar
        self.now = run.now
        self.log = run.log
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
            resets.complete = False
            resets.tally.problem(f"activity unreadable, no reset this run: {error}")
            with self.db.connection() as conn:  # each watch says why its steps wait
                resets.unreadable = watches.set_open_watch_errors(
                    conn, error=str(error), at=self.now
                )
            return resets
        resets.tally.count("crm_activity_changed", sum(len(m) for m in moments.values()))
        for broken in self.invalid:
            resets.tally.problem(f"CRM activity record breaks its schema, skipped: {broken}")
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
            if fresh:
                overtaken = self._reset(watch, max(fresh))
                resets.tally.count("reset")
                if overtaken:
                    resets.tally.count("tasks_overtaken", overtaken)
        return resets

    def _reset(self, watch: Watch, latest: Activity) -> int:
        """Plan the open steps again from ``latest``, record what it was, and mark the watch's
        tasks not closed yet as overtaken by it (one transaction); how many were marked."""
        reset_on = local_date(latest.at, watch.time_zone)
        with self.db.connection() as conn, conn.transaction():
            planned = [s.planned() for s in steps.steps_of(conn, watch.id) if s.open]
            for step in replan_steps(reset_on, planned, self.calendar):
                steps.replan_step(conn, watch_id=watch.id, step_no=step.step_no, due_on=step.due_on)
            watches.mark_reset(conn, watch_id=watch.id, at=latest.at)
            steps.record_contact(conn, watch_id=watch.id, kind=latest.kind)
            marked = steps.mark_overtaken(conn, watch_id=watch.id, at=latest.at, kind=latest.kind)
        return len(marked)
