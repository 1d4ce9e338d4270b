"""Degraded is an alert: a job whose runs keep ending ``partial`` (green in the UI, but a vendor
away and work skipped) raises one alert per episode, naming the vendor, its error and what was
skipped (the runs' ``followup/degraded`` tag), and one "recovered" when a run of it ends clean
again. An episode is the run of ``partial`` outcomes since the job's last clean run; it alerts
once it holds ``FOLLOWUP_ALERT_DEGRADED_RUNS`` runs, or two or more spanning
``FOLLOWUP_ALERT_DEGRADED_H`` hours. Read on every tick of ``alert_checks``
(``sensors.check_tick``). The alerts table remembers the episode that alerted (by its first
run): while it has no "recovered", no other is raised for the job, however long it lasts, and
the first run after it that ends clean raises the "recovered"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from followup_pipeline.engine.runs import Ended
from followup_pipeline.store.alerts import OpenDegraded, Signal

#: How many of a job's latest runs are read: an episode longer than this is "at least" as long.
READ_RUNS = 50
#: How far back a ``partial`` run makes its job looked at (jobs of episodes that alerted are
#: looked at until they recover, however long ago).
LOOK_BACK = timedelta(days=2)


@dataclass(frozen=True)
class Episode:
    """A job's latest run of ``partial`` outcomes, newest first, and the clean run that ended it
    (None: it goes on)."""

    job: str
    partial: tuple[Ended, ...]
    ended_by: Ended | None

    @property
    def first(self) -> Ended:
        return self.partial[-1]

    @property
    def source(self) -> str:
        """The alert row's source: the job and the episode's first run."""
        return f"degraded:{self.job}:{self.first.run_id}"


def episode_of(job: str, runs: Sequence[Ended]) -> Episode | None:
    """The current episode of ``runs`` (newest first), or the one the latest clean runs ended;
    None when the runs read hold no ``partial`` one."""
    index = 0
    while index < len(runs) and runs[index].outcome != "partial":
        index += 1
    if index == len(runs):
        return None
    end = index
    while end < len(runs) and runs[end].outcome == "partial":
        end += 1
    ended_by = runs[index - 1] if index > 0 else None
    return Episode(job, tuple(runs[index:end]), ended_by)


def _line(episode: Episode) -> str:
    latest = episode.partial[0]
    return latest.degraded or "it named no vendor; the run's log says what it skipped"


def degraded_signal(
    episode: Episode, *, now: datetime, runs: int, hours: float, zone: str, note: str = ""
) -> Signal | None:
    """The episode's alert, once it spans ``runs`` runs or ``hours`` hours (None before, and for
    an episode a clean run ended); ``note`` adds what waits because of it."""
    if episode.ended_by is not None:
        return None
    count = len(episode.partial)
    lasted = episode.partial[0].ended - episode.first.started
    if count < runs and (count < 2 or lasted < timedelta(hours=hours)):
        return None
    local = ZoneInfo(zone)
    many = f"at least {count}" if count >= READ_RUNS else str(count)
    return Signal(
        kind="degraded",
        source=episode.source,
        fingerprint=f"degraded:{episode.job}",
        subject=episode.job,
        message=(
            f"{many} runs in a row ended partial since "
            f"{episode.first.started.astimezone(local):%Y-%m-%d %H:%M %Z}: {_line(episode)}"
            + (f". {note}" if note else "")
        ),
        occurred_at=now,
        run_id=episode.partial[0].run_id,
    )


def recovered_signal(
    job: str, alerted: OpenDegraded, latest: Ended, *, now: datetime, zone: str
) -> Signal | None:
    """The "recovered" alert of the episode that raised ``alerted``, once the job's latest run
    (``latest``) ended clean after it (None while it does not)."""
    if latest.outcome != "ok" or latest.ended < alerted.occurred_at:
        return None
    local = ZoneInfo(zone)
    return Signal(
        kind="recovered",
        source="recovered:" + alerted.source.removeprefix("degraded:"),
        fingerprint=f"recovered:{job}",
        subject=job,
        message=(
            f"recovered: its run of {latest.ended.astimezone(local):%Y-%m-%d %H:%M %Z} ended "
            "clean; it had been ending partial since the alert of "
            f"{alerted.occurred_at.astimezone(local):%Y-%m-%d %H:%M %Z}"
        ),
        occurred_at=now,
        run_id=latest.run_id,
    )
