"""What the watchdog (``followup watchdog``, a process outside the Dagster daemon) finds stalled:
the daemon (its heartbeats), a running schedule's tick that did not come, a running sensor not
evaluated lately. Pure: ``commands/watchdog.py`` reads the instance and hands the moments in.

Each stall is a ``Cause`` with a stable id (``daemon``, ``schedule:<name>``, ``sensor:<name>``):
one alert when it begins, one "healed" when it is gone. A daemon without heartbeats stalls every
schedule and sensor: then its one cause names them, and they raise none of their own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

#: The daemons a machine needs (they beat every 30 s).
DAEMONS = ("SCHEDULER", "SENSOR", "QUEUED_RUN_COORDINATOR", "BACKFILL")
#: A sensor is late when not evaluated for this many of its intervals (and the tolerance).
SENSOR_INTERVALS = 3


@dataclass(frozen=True)
class Cause:
    """A stall: its id, what it is about (the alert's subject) and what was found."""

    id: str
    subject: str
    message: str


@dataclass(frozen=True)
class Tick:
    """A running schedule as the watchdog reads it: the latest moment its cron says it should
    have ticked by now (less the tolerance), when its latest tick came, since when it runs."""

    name: str
    due: datetime | None
    last: datetime | None
    running_since: datetime | None


@dataclass(frozen=True)
class Evaluation:
    """A running sensor: when it was last evaluated, its interval, since when it runs."""

    name: str
    last: datetime | None
    interval_s: float
    running_since: datetime | None


def _ago(now: datetime, then: datetime) -> str:
    seconds = int((now - then).total_seconds())
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def stale_daemons(
    beats: Mapping[str, datetime | None], *, now: datetime, late: timedelta
) -> list[str]:
    """The daemons (of ``DAEMONS``) whose last heartbeat is older than ``late``, or never came,
    each with how long ago."""
    stale: list[str] = []
    for daemon in DAEMONS:
        beat = beats.get(daemon)
        if beat is None:
            stale.append(f"{daemon} never")
        elif now - beat > late:
            stale.append(f"{daemon} {_ago(now, beat)} ago")
    return stale


def missed_tick(tick: Tick, *, zone: str) -> str | None:
    """What the schedule missed: the moment its cron said it should have ticked by (after it
    was switched on) with no tick since; None when it ticked."""
    if tick.due is None or (tick.running_since is not None and tick.running_since > tick.due):
        return None
    if tick.last is not None and tick.last >= tick.due:
        return None
    moment = tick.due.astimezone(ZoneInfo(zone))
    last = (
        f"its last tick was {tick.last.astimezone(ZoneInfo(zone)):%Y-%m-%d %H:%M %Z}"
        if tick.last
        else "it never ticked"
    )
    return f"{tick.name} missed its tick of {moment:%Y-%m-%d %H:%M %Z} ({last})"


def late_evaluation(sensor: Evaluation, *, now: datetime, late: timedelta) -> str | None:
    """What the sensor missed: evaluated longer ago than ``SENSOR_INTERVALS`` intervals and
    ``late`` (counted from when it was switched on, if it never was); None when it keeps up."""
    since = sensor.last or sensor.running_since
    if since is None:
        return None
    allowed = timedelta(seconds=sensor.interval_s * SENSOR_INTERVALS) + late
    if now - since <= allowed:
        return None
    when = f"last evaluated {_ago(now, sensor.last)} ago" if sensor.last else "never evaluated"
    return f"{sensor.name} {when} (every {sensor.interval_s:g} s)"


def causes(
    *,
    stale: Sequence[str],
    missed: Sequence[tuple[str, str]],
    late: Sequence[tuple[str, str]],
    now: datetime,
) -> list[Cause]:
    """The stalls now: the daemon's alone when its heartbeats stopped (it names what it
    stalls), else one per schedule that missed a tick and one per sensor left behind.
    ``missed`` and ``late``: (name, what) pairs."""
    if stale:
        stalled = [what for _, what in (*missed, *late)]
        also = f" Meanwhile: {'; '.join(stalled)}." if stalled else ""
        return [
            Cause(
                "daemon",
                "dagster-daemon",
                f"no heartbeat from the daemon ({', '.join(stale)}): no schedule fires, no "
                f"sensor runs, no queued run starts.{also}",
            )
        ]
    return [
        *(Cause(f"schedule:{name}", f"schedule {name}", what) for name, what in missed),
        *(Cause(f"sensor:{name}", f"sensor {name}", what) for name, what in late),
    ]


#: The cursor (``job_cursors``) the watchdog moves at each look: the alert checks, inside the
#: daemon, watch the watchdog in turn.
LOOKED = "watchdog_looked"


def watchdog_silent(looked: datetime | None, *, now: datetime, every_s: int) -> Cause | None:
    """The watchdog itself, seen from the alert checks: no look for three of its intervals
    (at least ten minutes) since its last one; None when it looks, or never looked here."""
    if looked is None:
        return None  # no watchdog on this machine yet: `followup doctor` says so
    allowed = max(timedelta(seconds=3 * every_s), timedelta(minutes=10))
    if now - looked <= allowed:
        return None
    return Cause(
        "watchdog",
        "followup watchdog",
        f"no look since {_ago(now, looked)} ago: the daemon, the ticks and the sensors go "
        "unwatched from outside; is its timer, service or CronJob running?",
    )


@dataclass(frozen=True)
class Decision:
    """What a look decides: the causes that begin (each an alert) and those healed since their
    alert (each a "healed"), by the id of the alert that opened them."""

    begin: list[Cause]
    healed: list[str]


def decide(
    found: Sequence[Cause], open_ids: Sequence[str], judged: Collection[str] | None = None
) -> Decision:
    """Against the causes alerted and not healed yet (``open_ids``): what begins, what healed.
    Only what was looked at heals (``judged``: the running schedules' and sensors' ids; a
    stopped or removed one is not "running again"); while the daemon is stalled nothing else
    heals: its cause stands for every other."""
    ids = {cause.id for cause in found}
    stalled = "daemon" in ids

    def heals(cause_id: str) -> bool:
        if cause_id in ids or (stalled and cause_id != "daemon"):
            return False
        return cause_id == "daemon" or judged is None or cause_id in judged

    return Decision(
        begin=[cause for cause in found if cause.id not in open_ids],
        healed=[cause_id for cause_id in open_ids if heals(cause_id)],
    )
