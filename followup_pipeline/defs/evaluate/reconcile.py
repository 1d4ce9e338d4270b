"""Step 1 of every ``evaluate`` run: reconcile watches with the CRM.

Every run lists every deal in the watched stages (keyset pages of 200) and compares the list
with the open watches: a lost webhook costs at most one hour, and so does a deleted deal or a
change that did not move ``modifiedAt``. Every CRM deal in a watched stage gets a watch, and
every open watch whose deal is not listed is read on its own and closed with the reason the CRM
gives. What to open and close is decided by the one set of rules (``domain/registration.py``),
as for a webhook, and applied by ``apply_registrations``: a page of deals at a time, in one
transaction each.

A watch opened here is planned from the best evidence of when its deal entered the stage: the
deal's ``modifiedAt`` (a stage change moves it, so the deal entered no later; a later edit only
makes the cadence start later, never earlier), but not before the machine began watching (a deal
that sat in an offer stage before the machine existed starts when it starts), nor after now.
"""

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import dagster as dg
import psycopg

from followup_pipeline.defs.evaluate.ports import DealSource
from followup_pipeline.defs.evaluate.tasks import TaskLedger
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.registration import Observation, decide, stage_policy
from followup_pipeline.engine.scope import Database, RunScope, Tally
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError
from followup_pipeline.integrations.espocrm_models import Deal, DealListing
from followup_pipeline.settings import Settings
from followup_pipeline.store import census, watches
from followup_pipeline.store.cadences import Plans, load_plans
from followup_pipeline.store.watches import Watch

#: Deals decided and written in one transaction.
PAGE = 500


class Reconciler:
    """Opens the watches the CRM says are missing and closes those whose deal left."""

    def __init__(
        self,
        run: RunScope,
        db: Database,
        crm: DealSource,
        tasks: TaskLedger,
        settings: Settings,
        *,
        calendar: BusinessCalendar,
        watching_since: datetime | None = None,
    ) -> None:
        self.db = db
        self.watching_since = watching_since or run.now
        self.crm = crm
        self.tasks = tasks
        self.settings = settings
        self.calendar = calendar
        self._plan: Plans | None = None
        self.now = run.now
        self.policy = stage_policy(settings)
        self.tally = Tally(run.log)
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

    def run(self) -> Tally:
        """Open the missing watches and close those whose deal left the watched stages."""
        tally = self.tally = Tally(self.tally.log)
        # The open watches before the listing: one a webhook closes while the CRM is read (it
        # may take minutes) is neither reopened from the listing nor read as departed.
        with self.db.connection() as conn:
            open_now = {w.subject_id: w for w in watches.open_watches(conn)}
        listing = self._listed(lambda: self.crm.list_deals(stages=self.settings.watched_stages))
        if listing is None:
            return tally
        listed = {deal.id: deal for deal in listing.records}
        tally.count("crm_deals_watched_stages", len(listed))
        # The stage a watch may end in (exhausted) is the deal's, not the first one; names,
        # owner and amount are what the morning lists show (and to whom).
        changed = {
            w.id: facts
            for subject, w in open_now.items()
            if subject in listed and (facts := _facts(listed[subject])) != _facts_of(w)
        }
        if changed:
            with self.db.connection() as conn:
                watches.set_facts(conn, changed, at=self.now)
        quiet = self.register([deal for deal in listed.values() if deal.id not in open_now])
        self.close_departed([w for subject_id, w in open_now.items() if subject_id not in listed])
        with self.db.connection() as conn:
            still_open = watches.count_open_watches(conn)
            self.record_census(conn, listed.values())
        if len(listed) - quiet > 0 and still_open == 0:
            raise dg.Failure(
                description=(
                    f"the CRM has {len(listed) - quiet} deal(s) in the watched stages but no watch "
                    "is open after reconciliation: the machine would follow up nothing"
                )
            )
        return tally

    def record_census(self, conn: psycopg.Connection[Any], listed: Iterable[Deal]) -> None:
        """Today's reading for the census of the watched stages (a day of the team's zone):
        each one's deals listed by this reading (their entries are recorded as watches open or
        change); a stage that goes quiet is an alert (``domain/census.py``)."""
        counts = Counter(deal.stage for deal in listed)
        per_stage = {stage: counts[stage] for stage in self.settings.watched_stages}
        today = local_date(self.now, self.settings.timezone)
        census.record(conn, per_stage, day=today, at=self.now)

    def _listed(self, read: Callable[[], DealListing]) -> DealListing | None:
        """A listing of deals, each record that breaks its schema reported as a problem; None
        when the listing failed (a problem too, and this run is not ``complete``)."""
        try:
            listing = read()
        except IntegrationError as error:
            self.tally.problem(
                f"CRM listing failed, no registrations or closes this run: {error}", error
            )
            self.complete = False
            return None
        for broken in listing.invalid:
            self.tally.problem(
                f"CRM record breaks its schema, skipped: {broken}; raw record: {broken.raw!r}"
            )
        return listing

    def plan(self) -> Plans:
        """How new watches are planned (per stage), read when the first one opens (a missing
        cadence row fails the openings, not the runs that only follow existing watches)."""
        if self._plan is None:
            with self.db.connection() as conn:
                self._plan = load_plans(conn, self.settings, calendar=self.calendar)
        return self._plan

    def register(self, deals: Sequence[Deal]) -> int:
        """Decide and apply the watches of ``deals`` as the CRM lists them now, a page at a
        time; closed watches have their open steps skipped. How many were not reopened
        because their latest watch closed ``exhausted`` or ``unwatched``."""
        quiet = 0
        for start in range(0, len(deals), PAGE):
            page = deals[start : start + PAGE]
            observed = [Observation(deal.id, deal.stage, self.now, "reconcile") for deal in page]
            with self.db.connection() as conn:
                latest = watches.latest_watches_of(conn, [deal.id for deal in page])
            decided = decide(observed, latest, self.policy)
            opening = any(r.action == "open" for r in decided)
            plan = self.plan() if opening else None
            with self.db.connection() as conn, conn.transaction():
                ended = watches.apply_registrations(
                    conn,
                    decided,
                    subjects={d.id: d.subject(self.settings.crm_deal_url(d.id)) for d in page},
                    plan=plan,
                    at=self.now,
                    registered_by="reconcile",
                    entered={d.id: self.entered_at(d) for d in page},
                )
            for registration in ended.values():
                if registration.outcome == "registered":
                    self.tally.count("registered")
                elif registration.outcome in ("not_reopened_exhausted", "not_reopened_unwatched"):
                    quiet += 1
                    self.tally.count(registration.outcome)
                elif registration.action == "close" and registration.reason is not None:
                    self.tasks.closed(latest[registration.subject_id], registration.reason)
        return quiet

    def entered_at(self, deal: Deal) -> datetime:
        """When the deal entered its stage, as far as the CRM shows: its ``modifiedAt``, within
        the time the machine has been watching."""
        return min(self.now, max(deal.modified_at, self.watching_since))

    def close_departed(self, departed: Sequence[Watch]) -> None:
        """Read the deals no longer listed (50 to a listing by id) and close each watch with the
        CRM's reason (a deal may have entered a watched stage after the listing: then its watch
        stays open). A deal the listing by id leaves out is asked on its own: 404 is gone."""
        if not departed:
            return
        try:
            found = self.crm.list_deals_by_ids(ids=[w.subject_id for w in departed])
        except IntegrationError as error:
            self.tally.problem(
                f"CRM unreadable, {len(departed)} watch(es) stay open: {error}", error
            )
            return
        stages = {deal.id: deal.stage for deal in found.records}
        for watch in departed:
            if watch.subject_id in stages:
                stage: str | None = stages[watch.subject_id]
            else:
                try:
                    stage = self.crm.get_deal(deal_id=watch.subject_id).stage
                except NotFoundError:
                    stage = None
                except IntegrationError as error:
                    self.tally.problem(
                        f"deal {watch.subject_id}: CRM unreadable, its watch stays open: {error}",
                        error,
                        item=f"deal {watch.subject_id}",
                    )
                    continue
            self.tasks.apply(watch, Observation(watch.subject_id, stage, self.now, "reconcile"))


def _facts(deal: Deal) -> watches.DealFacts:
    amount = round(deal.amount, 2) if deal.amount is not None else None
    return watches.DealFacts(
        deal.name,
        deal.account_name,
        deal.assigned_user_id,
        deal.assigned_user_name,
        deal.stage,
        amount,
        deal.amount_currency,
    )


def _facts_of(watch: watches.Watch) -> watches.DealFacts:
    amount = round(float(watch.amount), 2) if watch.amount is not None else None
    return watches.DealFacts(
        watch.subject_name,
        watch.account_name,
        watch.assigned_user_id,
        watch.assigned_user_name,
        watch.stage,
        amount,
        watch.amount_currency,
    )
