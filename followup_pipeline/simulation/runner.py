"""The simulation's day: the machine's schedules as the daemon would fire them, the world's hours
between them, the chaos of each hour, the analyst's backfill of failed report partitions, and at
the end a quiet hour that lets every retry settle before the invariants are checked.

All times are the team's (``FOLLOWUP_TIMEZONE``, Berlin by default); each run's clock stands at
its instant. The first simulated day is Monday 2 March 2026: the weeks that follow cross both
daylight-saving changes of the two academies (New York on 8 March, Berlin on 29 March).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from zoneinfo import ZoneInfo

import psycopg

from followup_pipeline.settings import LEAD_SOURCES
from followup_pipeline.simulation.chaos import HELD, KILLS, WEEKLY_KILL, Chaos, Kill
from followup_pipeline.simulation.coverage import deals_followed, deliveries_stored
from followup_pipeline.simulation.invariants import Invariant, ReportWindow, check
from followup_pipeline.simulation.scenario import Scenario
from followup_pipeline.simulation.world import RunResult, World
from followup_pipeline.store.db import StoreError, connect

log = logging.getLogger(__name__)

FIRST_DAY = date(2026, 3, 2)
#: The business hours the world is busy in; the machine evaluates every hour of the day.
HOURS = range(8, 18)
#: When each killed job is killed: the hour its writes come (the first evaluate of the day
#: makes the day's tasks; Berlin's 09:00 reminders, by mail, go out in the 09 hour's run).
KILL_HOURS = {"evaluate": 8, "lead_intake": 12, "lms_reminders": 9}


@dataclass(frozen=True)
class Options:
    days: int
    deals: int
    seed: int
    chaos: bool
    #: Postgres goes away once (a crash, then a start) when there is chaos and days enough.
    outage: bool = True
    database_url: str | None = None
    #: Faults per hour on average (each hour: another fault while a draw stays below it).
    faults_per_hour: float = 0.45


@dataclass
class Outcome:
    """What a simulation did and found."""

    options: Options
    invariants: list[Invariant]
    runs: Counter[str] = field(default_factory=Counter)
    failed_runs: Counter[str] = field(default_factory=Counter)
    world: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    hit: Counter[str] = field(default_factory=Counter)
    backfilled: list[str] = field(default_factory=list)
    seconds: float = 0.0
    seconds_per_day: list[float] = field(default_factory=list)
    #: Why a run meant to be killed ended on its own with an error.
    child_errors: list[str] = field(default_factory=list)
    #: Wall seconds in each job's runs.
    job_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def vacuous(self) -> list[str]:
        """The invariants that checked nothing: no proof of anything."""
        return [i.name for i in self.invariants if i.checked == 0]

    @property
    def holds(self) -> bool:
        return all(i.holds for i in self.invariants) and not self.vacuous


def business_days(first: date, count: int) -> list[date]:
    days: list[date] = []
    day = first
    while len(days) < count:
        if day.weekday() < 5:
            days.append(day)
        day += timedelta(days=1)
    return days


class Simulation:
    """One simulation: ``run()`` returns its ``Outcome``."""

    def __init__(self, options: Options, *, progress: Callable[[str], None] | None = None):
        self.options = options
        self.progress = progress or (lambda line: None)
        self.days = business_days(FIRST_DAY, options.days)
        self.zone = ZoneInfo("Europe/Berlin")
        self.runs: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.failed_reports: dict[tuple[str, str], str] = {}
        self.backfilled: list[str] = []
        self.windows: list[ReportWindow] = []
        self.late_closes: list[str] = []
        #: EspoCRM's queue is held back in the next business hour (drawn with the morning's faults).
        self.held = False
        #: The closed deals whose watches an ``evaluate`` after the close was checked for.
        self.closes_checked: set[str] = set()
        self.outage_day = len(self.days) // 2 if options.chaos and options.outage else -1

    def at(self, day: date, hour: int, minute: int = 0) -> datetime:
        return datetime.combine(day, clock_time(hour, minute), self.zone).astimezone(UTC)

    def run(self) -> Outcome:
        started = time.monotonic()
        options = self.options
        start = self.at(self.days[0], 6)
        with World(start=start, seed=options.seed, database_url=options.database_url) as world:
            self.world = world
            self.zone = ZoneInfo(world.settings.timezone)
            # Not for secrets: a seeded world, the same for the same seed (S311 is about keys).
            rng = random.Random(options.seed)  # noqa: S311
            world_rng, chaos_rng = (random.Random(rng.random()) for _ in range(2))  # noqa: S311
            self.scenario = Scenario(world, world_rng, self.days, options.deals)
            self.chaos = Chaos(world, chaos_rng, enabled=options.chaos,
                               per_hour=options.faults_per_hour)  # fmt: skip
            world.set_time(start)
            self.scenario.setup(start)
            per_day = []
            for index, day in enumerate(self.days):
                begun = time.monotonic()
                self.day(index, day)
                per_day.append(time.monotonic() - begun)
                self.progress(f"day {index + 1}/{len(self.days)} {day}: {per_day[-1]:.1f} s")
            self.settle()
            end = self.world.clock.now()
            with connect(world.db_url, autocommit=True) as conn:
                invariants = check(conn, world.control, world.settings, end=end,
                                   windows=self.windows)  # fmt: skip
                deals = [(d.id, d.stage) for d in self.scenario.deals.values() if not d.gone]
                invariants[1:1] = [
                    deals_followed(conn, deals),
                    deliveries_stored(conn, world.control),
                ]
            invariants.insert(0, self.closed_within_one_evaluate())
            return Outcome(
                options=options,
                invariants=invariants,
                runs=self.runs,
                failed_runs=self.failed,
                world=self.scenario.did,
                injected=self.chaos.injected,
                hit=self.chaos.hit,
                backfilled=self.backfilled,
                seconds=time.monotonic() - started,
                seconds_per_day=per_day,
                job_seconds=dict(world.seconds),
                child_errors=self.chaos.child_errors,
            )

    # -- one business day -----------------------------------------------------------------------

    def day(self, index: int, day: date) -> None:
        world = self.world
        world.set_time(self.at(day, 2))
        self.job("crm_changes")
        self.job("lead_intake")
        if day.weekday() == 0:
            world.set_time(self.at(day, 7))
            self.job("lms_weekly")
        world.set_time(self.at(day, 7, 30))
        # The morning's faults are posted before the morning list and last until the end of
        # the 08 hour, whose first evaluate makes the day's tasks: the mails and creates they
        # are meant for come then.
        self.held = HELD in self.chaos.hour()
        self.report("morning_report", f"{day:%Y-%m-%d}", kill=self.kill_of(index))
        world.set_time(self.at(day, 7, 45))
        self.backfill()
        for hour in HOURS:
            self.hour(index, day, hour)
        if day.weekday() == 4:
            world.set_time(self.at(day, 15, 55))
            kill = Kill(*WEEKLY_KILL) if self.options.chaos else None
            self.report("weekly_report", f"{day:%Y-%m-%d}", kill=kill)

    def kill_of(self, index: int) -> Kill | None:
        """Every other day under chaos, one run killed for real: the jobs of ``KILLS`` by turn."""
        if not self.options.chaos or index % 2 != 1:
            return None
        job, vendor, fault, what = KILLS[(index // 2) % len(KILLS)]
        return Kill(job, vendor, fault, what)

    def hour(self, index: int, day: date, hour: int) -> None:
        world = self.world
        down = index == self.outage_day and hour == 11
        world.set_time(self.at(day, hour, 5))
        held = HELD in self.chaos.hour() or self.held
        self.held = False
        kill = self.kill_of(index)
        if kill is not None and KILL_HOURS.get(kill.job) != hour:
            kill = None
        self.scenario.hour(index, hour, world.clock.now(), lead=kill is not None)
        if down and world.database_down():
            self.chaos.injected["Postgres down (a crash) for an hour"] += 1
            self.chaos.hit["Postgres down (a crash) for an hour"] += 1
        self.deliver(espocrm=not held)
        world.set_time(self.at(day, hour, 10))
        # What the event sensors launch: a job when its sources have due events.
        due = self.due_sources()
        if "espocrm" in due:
            self.job("register")
        if due & set(LEAD_SOURCES) or (kill is not None and kill.job == "lead_intake"):
            self.job("lead_intake", kill=kill)
        world.set_time(self.at(day, hour, 15))
        before = world.clock.now()
        if self.job("evaluate", partition=f"{day:%Y-%m-%d}-{hour:02d}:00", kill=kill).success:
            self.check_closed(before)
        world.set_time(self.at(day, hour, 30))
        if hour % 2 == 0:
            self.job("enrich")
        if hour % 2 == 1:  # the academies' 09:00 (Berlin's 09, New York's 15): odd hours
            world.set_time(self.at(day, hour, 45))
            self.job("lms_reminders", kill=kill)
        if down:
            world.database_up()
        for result in world.alert_tick():
            self.count(result)
        self.chaos.clear()

    def due_sources(self) -> set[str]:
        """The sources with events due now (what the event sensors look at); none while the
        database is away (a sensor that cannot read the log launches nothing)."""
        try:
            with connect(self.world.db_url, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT DISTINCT source FROM events"
                    " WHERE status = 'pending' AND next_attempt_at <= now()"
                ).fetchall()
        except (StoreError, psycopg.Error):
            return set()
        return {str(row["source"]) for row in rows}

    def deliver(self, *, espocrm: bool = True) -> None:
        """EspoCRM's queue job (unless held back) and the senders' retries (their retries wait
        on the clock)."""
        if espocrm:
            self.world.control("POST", "/webhooks/flush", {})
        self.world.control("POST", "/senders/flush", {})

    # -- runs ------------------------------------------------------------------------------------

    def job(
        self, name: str, *, partition: str | None = None, kill: Kill | None = None
    ) -> RunResult:
        if kill is not None and kill.job == name:
            self.chaos.kill(kill, partition=partition)
        result = self.world.run(name, partition=partition)
        self.count(result)
        return result

    def count(self, result: RunResult) -> None:
        self.runs[result.job] += 1
        if not result.success:
            self.failed[result.job] += 1
            log.debug("%s failed at %s: %s", result.job, result.at, result.error)

    def report(self, job: str, partition: str, *, kill: Kill | None = None) -> None:
        self.windows.append(ReportWindow(job, partition))
        if kill is not None and kill.job == job and self.chaos.kill(kill, partition=partition):
            # The killed run is lost to Dagster as a failed one: the analyst backfills it.
            self.failed_reports[(job, partition)] = "killed"
            return
        result = self.world.run(job, partition=partition)
        self.count(result)
        if not result.success:
            self.failed_reports[(job, partition)] = result.error

    def backfill(self) -> None:
        """The analyst's morning: every failed report partition launched again from the UI."""
        for (job, partition), _ in sorted(self.failed_reports.items()):
            result = self.world.run(job, partition=partition)
            self.count(result)
            if result.success:
                self.backfilled.append(f"{job} {partition}")
                del self.failed_reports[(job, partition)]

    def check_closed(self, before: datetime) -> None:
        """Every deal closed before this evaluate has no open watch after it."""
        closed = [d for d, at in self.scenario.closed_at.items() if at <= before]
        if not closed:
            return
        with connect(self.world.db_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT subject_id FROM watches WHERE closed_at IS NULL"
                " AND subject_id = ANY(%(ids)s::text[])",
                {"ids": closed},
            ).fetchall()
        self.late_closes.extend(
            f"deal {row['subject_id']} at {before:%Y-%m-%d %H:%M}" for row in rows
        )
        self.closes_checked.update(closed)

    def closed_within_one_evaluate(self) -> Invariant:
        checked = len(self.closes_checked)
        return Invariant(
            "closed deals' watches closed within one evaluate",
            not self.late_closes,
            checked,
            tuple(self.late_closes[:5]),
        )

    def settle(self) -> None:
        """A quiet hour after the last day: no fault, every retry due, the leases run out."""
        world = self.world
        self.chaos.clear()
        last = self.days[-1]
        for hour, minute in ((18, 0), (18, 30)):
            world.set_time(self.at(last, hour, minute))
            self.deliver()
            self.wait_for_leases()
            for name in ("register", "lead_intake", "crm_changes", "lead_intake", "enrich"):
                self.job(name)
            before = world.clock.now()
            if self.job("evaluate", partition=f"{last:%Y-%m-%d}-{hour:02d}:00").success:
                self.check_closed(before)
            self.job("lms_reminders")
            self.backfill()
            for result in world.alert_tick():
                self.count(result)

    def wait_for_leases(self) -> None:
        """Events a killed run still holds are free once their lease ends (real time)."""
        with connect(self.world.db_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT extract(epoch FROM max(claimed_until) - now())::float8 AS left_s"
                " FROM events WHERE status = 'pending'"
            ).fetchone()
        left = float(row["left_s"] or 0) if row else 0.0
        if left > 0:
            time.sleep(min(left + 0.5, 120))
