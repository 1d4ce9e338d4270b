"""``followup watchdog [--once] [--every S]``: the machine's scheduling watched from outside it.

The alert checks are a sensor of the daemon they would have to report on: a dead daemon, a
schedule's tick that never came or a sensor left behind alerts no one from inside. This process
reads the Dagster instance itself (the daemons' heartbeats, each running schedule's last tick
against its cron, each running sensor's last evaluation; ``domain/watchdog.py`` decides) and sends
its alerts itself, not through the ``alert`` job (which needs the daemon): by mail to the
operations owner and backup, as a task in the operations list in ClickUp when mail fails
(``defs/alerts/delivery.py``). One alert when a stall begins, one "healed" when it is gone; an
alert that reached nobody is tried again at each look. ``followup dev`` runs it beside the
daemon; ``deploy/`` runs it as a systemd timer, a compose service and a Kubernetes CronJob.
"""

from __future__ import annotations

import argparse
import logging
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

from followup_pipeline.commands import in_environment
from followup_pipeline.defs.alerts.board import AlertNotSent
from followup_pipeline.defs.alerts.delivery import AlertDelivery, Delivered
from followup_pipeline.domain.cron import last_fire
from followup_pipeline.domain.localtime import for_people
from followup_pipeline.domain.watchdog import (
    LOOKED,
    Cause,
    Evaluation,
    Tick,
    causes,
    decide,
    late_evaluation,
    missed_tick,
    stale_daemons,
)
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.machine import (
    LOCATION,
    install_dagster_home,
    open_instance,
    with_sandbox,
)
from followup_pipeline.settings import Settings, secret_environment
from followup_pipeline.store import alerts as store
from followup_pipeline.store.db import connect, resolve_database_url
from followup_pipeline.store.enrichments import set_cursor

log = logging.getLogger("followup_pipeline.watchdog")
#: Dagster's interval for a sensor that names none.
DEFAULT_SENSOR_INTERVAL_S = 30


def _moment(timestamp: float | None) -> datetime | None:
    return datetime.fromtimestamp(timestamp, UTC) if timestamp else None


def last_due(cron: str | Sequence[str], zone: str, before: datetime) -> datetime | None:
    """The latest moment ``cron`` fires at or before ``before``, in ``zone`` (``domain/cron.py``:
    read as Dagster reads it)."""
    crons = [cron] if isinstance(cron, str) else list(cron)
    found = [m for c in crons if (m := last_fire(c, zone, before)) is not None]
    return max(found) if found else None


def look(instance: Any, settings: Settings, now: datetime) -> tuple[list[Cause], set[str]]:
    """What is stalled now, read from the Dagster ``instance``, and what was looked at (the
    running schedules' and sensors' causes: only those can heal)."""
    from followup_pipeline.defs import build_definitions

    beats = {
        name: _moment(beat.timestamp) for name, beat in instance.get_daemon_heartbeats().items()
    }
    stale = stale_daemons(
        beats, now=now, late=timedelta(seconds=settings.watchdog_heartbeat_late_s)
    )
    repository = build_definitions(settings).get_repository_def()
    stored = {
        state.instigator_name: state
        for state in instance.all_instigator_state()
        if state.origin.repository_origin.code_location_origin.location_name == LOCATION
    }
    tolerance = timedelta(seconds=settings.watchdog_tick_late_s)
    missed: list[tuple[str, str]] = []
    judged: set[str] = {"watchdog"}  # (it looks: its own silence is over)
    for schedule in repository.schedule_defs:
        state = stored.get(schedule.name)
        if state is None or not state.is_running:
            continue  # stopped (doctor says so), or never ticked under this instance
        judged.add(f"schedule:{schedule.name}")
        zone = schedule.execution_timezone or settings.timezone
        ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
        data = state.instigator_data
        # The cron the daemon ticks by, as stored with the schedule (the code's, else).
        cron = getattr(data, "cron_schedule", None) or schedule.cron_schedule
        tick = Tick(
            name=schedule.name,
            due=last_due(cron, zone, now - tolerance),
            last=_moment(ticks[0].timestamp) if ticks else None,
            running_since=_moment(getattr(data, "start_timestamp", None)),
        )
        what = missed_tick(tick, zone=settings.timezone)
        if what is not None:
            missed.append((schedule.name, what))
    late: list[tuple[str, str]] = []
    for sensor in repository.sensor_defs:
        state = stored.get(sensor.name)
        if state is None or not state.is_running:
            continue
        judged.add(f"sensor:{sensor.name}")
        data = state.instigator_data
        evaluation = Evaluation(
            name=sensor.name,
            last=_moment(getattr(data, "last_tick_timestamp", None)),
            interval_s=float(sensor.minimum_interval_seconds or DEFAULT_SENSOR_INTERVAL_S),
            running_since=_moment(getattr(data, "last_sensor_start_timestamp", None)),
        )
        what = late_evaluation(evaluation, now=now, late=tolerance)
        if what is not None:
            late.append((sensor.name, what))
    return causes(stale=stale, missed=missed, late=late, now=now), judged


@contextmanager
def _delivery(settings: Settings, now: datetime) -> Iterator[AlertDelivery]:
    """The alert channels as the ``alert`` job has them, built here (no Dagster run)."""
    import dagster as dg

    from followup_pipeline.defs import build_resources

    wanted = ("postgres", "outlook", "ops_clickup")
    resources = {name: value for name, value in build_resources(settings).items() if name in wanted}
    url = resolve_database_url(settings)
    secrets = {**secret_environment(settings), "FOLLOWUP_DATABASE_URL": url}
    with in_environment(secrets), dg.build_resources(resources) as built:
        board = built.ops_clickup.get_client() if settings.ops_clickup_list_id else None
        run = RunScope(now, None, log)
        yield AlertDelivery(run, built.postgres, built.outlook.get_client(), board, settings)


def once(
    settings: Settings, now: datetime, *, settling: bool = False
) -> tuple[list[Cause], list[str]]:
    """One look: record what began and what healed, send every watchdog alert that reached
    nobody yet; what is stalled now, and what could not be sent. ``settling``: the machine
    (and this watchdog) just started: heartbeats and ticks of before the start are not a stall
    yet: nothing begins or heals."""
    found: list[Cause] = []
    judged: set[str] = set()
    if not settling:
        with open_instance(settings) as instance:
            found, judged = look(instance, settings, now)
    url = resolve_database_url(settings)
    with connect(url, autocommit=True) as conn:
        if not settling:
            set_cursor(conn, LOOKED, now)  # (the alert checks watch the watchdog in turn)
        opened = store.watchdog_open(conn)
        decision = decide(found, [] if settling else list(opened), judged)
        for cause in decision.begin:
            store.record(
                conn,
                store.stall_signal(cause.id, cause.subject, cause.message, since=now, at=now),
                # Once per cause and window: a daemon that keeps dying is one mail a window.
                window=settings.alert_window(),
            )
        for cause_id in decision.healed:
            was = opened[cause_id]
            since = for_people(was.occurred_at, settings.timezone)
            store.record(
                conn,
                store.Signal(
                    kind="healed",
                    source="healed:" + was.source.removeprefix("watchdog:"),
                    fingerprint=f"healed:{cause_id}",
                    subject=was.subject,
                    message=f"healed: it runs again (stalled since the alert of {since})",
                    occurred_at=now,
                ),
                window=None,
            )
        waiting = [u.key for u in store.unsent(conn) if u.key.startswith(store.WATCHDOG_KEYS)]
    failed: list[str] = []
    if waiting:
        with _delivery(settings, now) as delivery:
            for key in waiting:
                try:
                    done: Delivered = delivery.deliver(key)
                    print(f"watchdog: {key}: {done.channel} {done.reason}".rstrip(), flush=True)
                except AlertNotSent as error:
                    failed.append(str(error))
    return found, failed


class _Stop:
    """SIGINT and SIGTERM end the loop after the look in progress (not inside it: Dagster's own
    code may hold on to an interrupt), and cut a wait short."""

    def __init__(self) -> None:
        self.asked = False
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._ask)

    def _ask(self, signum: int, frame: FrameType | None) -> None:
        self.asked = True

    def wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.asked and time.monotonic() < end:
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))


def _watchdog(args: argparse.Namespace, settings: Settings) -> int:
    settings = with_sandbox(settings)
    stop = _Stop() if not args.once else None
    install_dagster_home(settings)  # (a host or a container of its own has none yet)
    every = args.every or settings.watchdog_every_s
    logging.getLogger("followup_pipeline.integrations").setLevel(logging.ERROR)
    # Looking on and on beside a machine that starts with it: the daemon's first heartbeats and
    # the sensors' first evaluations are waited for (a timer's or a CronJob's look is not).
    settle_until = time.monotonic() + (0 if args.once else settings.watchdog_heartbeat_late_s)
    if stop is not None:
        print(
            f"watchdog: a look every {every} s (the daemon's heartbeats late after "
            f"{settings.watchdog_heartbeat_late_s} s, a tick after "
            f"{settings.watchdog_tick_late_s} s); the first after "
            f"{settings.watchdog_heartbeat_late_s} s",
            flush=True,
        )
    shown: set[str] = set()
    while True:
        now = datetime.now(UTC)
        try:
            found, failed = once(settings, now, settling=time.monotonic() < settle_until)
        except Exception as error:  # (a database away for a moment: look again)
            print(f"watchdog: the look failed ({type(error).__name__}: {error})", flush=True)
            if stop is None:
                return 2
            stop.wait(every)
            if stop.asked:
                return 0
            continue
        ids = {cause.id for cause in found}
        for cause in found:
            if cause.id not in shown:
                print(f"watchdog: {cause.subject}: {cause.message}", flush=True)
        for cause_id in shown - ids:
            print(f"watchdog: {cause_id} healed", flush=True)
        for problem in failed:
            print(f"watchdog: alert NOT SENT: {problem}", flush=True)
        shown = ids
        if stop is None:
            return 1 if found or failed else 0
        stop.wait(every)
        if stop.asked:
            print("watchdog: stopped", flush=True)
            return 0


def register(commands: Any) -> None:
    """Add ``watchdog``."""
    parser = commands.add_parser(
        "watchdog",
        help="watch the daemon, the schedules' ticks and the sensors from outside Dagster",
    )
    parser.add_argument("--once", action="store_true", help="look once (a timer or a CronJob)")
    parser.add_argument(
        "--every", type=int, default=None, help="seconds between looks (FOLLOWUP_WATCHDOG_EVERY_S)"
    )
    parser.set_defaults(handler=_watchdog)
