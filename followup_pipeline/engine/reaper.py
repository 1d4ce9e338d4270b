"""The ``dead_runs`` sensor's tick: fail a started run whose process is gone.

Dagster's default run launcher starts each run as a child process of the code server and, in
Dagster 1.13, cannot check that process's health: a run whose host died stays ``STARTED`` until
its ``dagster/max_runtime``, and meanwhile holds its concurrency slot, so the event sensors
launch nothing. A run of ours holds a presence in Postgres while it executes
(``store/presence.py``): a session named after it, which dies with its process.

The rule: a run tagged ``followup/presence=postgres`` with no live presence is absent; so is a
run of a job that opens one (tagged ``expected`` from its launch) that has been started for
``START_GRACE_S`` (120 s) without opening it: its process died before its first step did (a code
server killed between a run's start and its resources). One absent
on two ticks in a row, and for at least ``FOLLOWUP_DEAD_RUN_AFTER_S`` since it was first seen
absent, is failed (``report_run_failed``): Dagster frees its slot, the ``alerts`` sensor reports
it, and ``run_retries`` tries it again. The wait covers the few seconds between the steps of a
multiprocess run, when no step process holds the presence. A run that started before the
database server did is left to run monitoring: the restart ended its presence, not its process.

The cursor (JSON) keeps the tick's time and when each absent run was first seen absent; one
present again is forgotten. A cursor older than ``STALE_AFTER_S`` (the sensor was stopped, the
daemon down) says nothing of the time since: watching starts anew.
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from followup_pipeline.engine.scope import Database
from followup_pipeline.store.presence import (
    START_GRACE_S,
    TAG,
    TAG_EXPECTED,
    TAG_VALUE,
    live_presences,
)

#: A previous tick longer ago than this does not show that a run stayed absent since.
STALE_AFTER_S = 300.0


@dataclass(frozen=True)
class Reaped:
    """What one tick did: the runs it failed, the absent runs it watches, the runs it left to
    run monitoring."""

    failed: list[str]
    watched: int
    left: int

    def reason(self) -> str:
        """The tick's skip reason."""
        said = f"{len(self.failed)} run(s) failed, {self.watched} absent run(s) watched"
        if self.left:
            said += f", {self.left} started before the database server (left to run monitoring)"
        return said


def dead_runs_tick(
    context: dg.SensorEvaluationContext,
    db: Database,
    *,
    now: datetime,
    after_s: float,
    lease_s: float,
) -> dg.SensorResult:
    """Fail the started runs whose presence has been gone on two ticks in a row and for
    ``after_s`` seconds; keep when the others were first seen absent in the cursor."""
    reaped, cursor = reap(context.instance, db, context.cursor, now, after_s, lease_s)
    for run_id in reaped.failed:
        context.log.warning(f"run {run_id} failed: its process is gone")
    return dg.SensorResult(skip_reason=dg.SkipReason(reaped.reason()), cursor=cursor)


def reap(
    instance: dg.DagsterInstance,
    db: Database,
    cursor: str | None,
    now: datetime,
    after_s: float,
    lease_s: float,
) -> tuple[Reaped, str]:
    """One tick at ``now``, from the previous tick's ``cursor``: what it did and the next
    cursor."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.STARTED], tags={TAG: [TAG_VALUE, TAG_EXPECTED]}
        )
    )
    if not records:
        return Reaped([], 0, 0), _dump(now, {})
    with db.connection() as conn:
        presences = live_presences(conn)
    seen = _load(cursor, now)
    absent: dict[str, datetime] = {}
    failed: list[str] = []
    left = 0
    for record in records:
        run = record.dagster_run
        if run.run_id in presences.run_ids:
            continue  # present: forgotten, if it was watched
        started = record.start_time or record.create_timestamp.timestamp()
        if run.tags.get(TAG) == TAG_EXPECTED and now.timestamp() - started < START_GRACE_S:
            continue  # starting: its first step has not opened its presence yet
        if started < presences.server_started.timestamp():
            left += 1
            continue
        first = seen.get(run.run_id)
        if first is None:
            absent[run.run_id] = now  # the first tick that sees it absent
        elif (now - first).total_seconds() < after_s:
            absent[run.run_id] = first
        elif _fail(instance, run.run_id, first, lease_s):
            failed.append(run.run_id)
    return Reaped(failed, len(absent), left), _dump(now, absent)


#: The tag of a run this sensor failed.
FAILED_BY_TAG = "followup/failed_by"


def _fail(instance: dg.DagsterInstance, run_id: str, since: datetime, lease_s: float) -> bool:
    """Fail run ``run_id`` if it is still started (it may have ended since the tick read it)."""
    run = instance.get_run_by_id(run_id)
    if run is None or run.status != dg.DagsterRunStatus.STARTED:
        return False
    at = since.astimezone(UTC)
    # Tagged first: the UI's run list (and `make scale-proof`) can tell such failures apart. A
    # retry inherits the tag, as every tag of its run: the failed one is the run that failed.
    instance.add_run_tags(run_id, {FAILED_BY_TAG: "dead_runs"})
    instance.report_run_failed(
        run,
        message=(
            f"its process is gone: no database session since {at:%Y-%m-%d %H:%M:%S} UTC (the "
            "dead_runs sensor, FOLLOWUP_DEAD_RUN_AFTER_S); its event claims come back after "
            f"FOLLOWUP_EVENT_LEASE_S ({lease_s:g} s)"
        ),
    )
    return True


def _load(cursor: str | None, now: datetime) -> dict[str, datetime]:
    """When each run absent at the previous tick was first seen absent: nothing from a bad
    cursor, or from a tick longer than ``STALE_AFTER_S`` ago."""
    try:
        stored = json.loads(cursor or "{}")
        tick = datetime.fromisoformat(stored["tick"])
        absent = stored["absent"]
        seen = {run_id: datetime.fromisoformat(at) for run_id, at in absent.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
    return seen if (now - tick).total_seconds() <= STALE_AFTER_S else {}


def _dump(now: datetime, absent: dict[str, datetime]) -> str:
    return json.dumps(
        {
            "tick": now.astimezone(UTC).isoformat(),
            "absent": {run_id: at.astimezone(UTC).isoformat() for run_id, at in absent.items()},
        },
        sort_keys=True,
    )
