"""Step 1 of ``evaluate``: reconcile watches with the CRM.

A lost webhook costs at most one hour: every CRM deal in a watched stage gets a watch, and every
open watch whose deal left is closed with the reason the CRM gives.
"""

from collections.abc import Callable
from datetime import datetime

import dagster as dg

from followup_pipeline.defs.common import stage_policy, subject_of
from followup_pipeline.defs.evaluate.ports import Database, DealSource, Log
from followup_pipeline.defs.evaluate.tally import Tally
from followup_pipeline.defs.evaluate.tasks import TaskLedger
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.decisions import Close, decide_for_stage
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError
from followup_pipeline.integrations.espocrm_models import Deal, DealListing
from followup_pipeline.settings import Settings
from followup_pipeline.store import watches
from followup_pipeline.store.cadences import Plan, load_plan
from followup_pipeline.store.watches import Watch


class Reconciler:
    """Opens the watches the CRM says are missing and closes those whose deal left."""

    def __init__(
        self,
        db: Database,
        crm: DealSource,
        tasks: TaskLedger,
        settings: Settings,
        *,
        calendar: BusinessCalendar,
        now: datetime,
        log: Log,
    ) -> None:
        self.db = db
        self.crm = crm
        self.tasks = tasks
        self.settings = settings
        self.calendar = calendar
        self._plan: Plan | None = None
        self.now = now
        self.policy = stage_policy(settings)
        self.tally = Tally(log)
        #: Whether the CRM was read whole this run (else the cursor stays where it was).
        self.complete = True

    def check_stage_names(self) -> None:
        """Fail loudly when a configured stage is not one of the CRM's stages."""
        valid = self.crm.stage_options()
        s = self.settings
        bad = [
            stage for stage in [*s.watched_stages, s.won_stage, s.lost_stage] if stage not in valid
        ]
        if bad:
            raise dg.Failure(
                description=(
                    f"configured stage(s) {', '.join(repr(b) for b in bad)} do not exist in the "
                    f"CRM; valid stages: {', '.join(repr(v) for v in valid)}. "
                    "Check FOLLOWUP_WATCHED_STAGES, FOLLOWUP_WON_STAGE and FOLLOWUP_LOST_STAGE."
                ),
                metadata={"bad_stages": bad, "valid_stages": valid},
            )

    def run_changes(self, since: datetime) -> Tally:
        """The hourly reconciliation: only the deals modified after ``since`` (one listing,
        every stage): open a watch for one that entered a watched stage, close the watch of
        one that left. A deleted deal is not listed: its webhook, or the day's first (full)
        run, closes its watch. ``complete`` False when the listing failed."""
        tally = self.tally = Tally(self.tally.log)
        listing = self._listed(lambda: self.crm.list_deals_modified_since(since=since))
        if listing is None:
            return tally
        tally.count("crm_deals_changed", len(listing.records))
        with self.db.connection() as conn:  # only the watches of the deals that changed
            changed = [deal.id for deal in listing.records]
            open_now = {w.subject_id: w for w in watches.open_watches_of(conn, changed)}
        for deal in listing.records:
            decision = decide_for_stage(deal.stage, self.policy)
            watch = open_now.get(deal.id)
            if isinstance(decision, Close):
                if watch is not None:
                    self.tasks.close_watch(watch, decision.reason)
            elif watch is None:
                opened = self._open(deal)
                if opened:
                    tally.count("registered")
                elif opened is None:
                    tally.count("not_reopened_exhausted")
        return tally

    def run(self) -> Tally:
        """Open the missing watches and close those whose deal left the watched stages."""
        tally = self.tally = Tally(self.tally.log)
        listing = self._listed(lambda: self.crm.list_deals(stages=self.settings.watched_stages))
        if listing is None:
            return tally
        listed = {deal.id: deal for deal in listing.records}
        tally.count("crm_deals_watched_stages", len(listed))
        with self.db.connection() as conn:
            open_now = {w.subject_id: w for w in watches.open_watches(conn)}
        quiet = 0
        for deal in listed.values():
            if deal.id in open_now:
                continue
            opened = self._open(deal)
            if opened is None:
                quiet += 1
                tally.count("not_reopened_exhausted")
            elif opened:
                tally.count("registered")
        for subject_id, watch in open_now.items():
            if subject_id not in listed:
                self._close_departed(watch)
        with self.db.connection() as conn:
            still_open = watches.count_open_watches(conn)
        if len(listed) - quiet > 0 and still_open == 0:
            raise dg.Failure(
                description=(
                    f"the CRM has {len(listed) - quiet} deal(s) in the watched stages but no watch "
                    "is open after reconciliation: the machine would follow up nothing"
                )
            )
        return tally

    def _listed(self, read: Callable[[], DealListing]) -> DealListing | None:
        """A listing of deals, each record that breaks its schema reported as a problem; None
        when the listing failed (a problem too, and this run is not ``complete``)."""
        try:
            listing = read()
        except IntegrationError as error:
            self.tally.problem(f"CRM listing failed, no registrations or closes this run: {error}")
            self.complete = False
            return None
        for broken in listing.invalid:
            self.tally.problem(
                f"CRM record breaks its schema, skipped: {broken}; raw record: {broken.raw!r}"
            )
        return listing

    def plan(self) -> Plan:
        """How new watches are planned, read when the first one opens (a missing cadence row
        fails the openings, not the runs that only follow existing watches)."""
        if self._plan is None:
            with self.db.connection() as conn:
                self._plan = load_plan(
                    conn,
                    cadence_name=self.settings.cadence_name,
                    time_zone=self.settings.timezone,
                    calendar=self.calendar,
                )
        return self._plan

    def _open(self, deal: Deal) -> bool | None:
        """Open the deal's watch: True if opened, False if one was open, None if its latest
        watch closed ``exhausted`` (final for that stay)."""
        plan = self.plan()
        with self.db.connection() as conn, conn.transaction():
            latest = watches.latest_watch_of(conn, deal.id)
            if latest is not None and latest.closed_reason == "exhausted":
                return None
            opened = watches.open_watch(
                conn,
                subject=subject_of(deal, self.settings),
                plan=plan,
                registered_at=self.now,
                registered_by="reconcile",
            )
        return opened is not None

    def _close_departed(self, watch: Watch) -> None:
        """Read a deal that is no longer listed and close its watch with the CRM's reason."""
        try:
            decision = decide_for_stage(
                self.crm.get_deal(deal_id=watch.subject_id).stage, self.policy
            )
        except NotFoundError:
            decision = Close("subject_gone")
        except IntegrationError as error:
            self.tally.problem(
                f"deal {watch.subject_id}: CRM unreadable, its watch stays open: {error}"
            )
            return
        if isinstance(decision, Close):  # else it entered a watched stage after the listing
            self.tasks.close_watch(watch, decision.reason)
