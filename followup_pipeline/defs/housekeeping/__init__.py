"""Housekeeping by itself (docs/operations.md, Keeping data tidy: purge, backup, restore): the
purge and the backup as Dagster schedules, on by default, every night in the team's zone.

- ``housekeeping_purge`` (03:15): ``followup purge`` with the retention settings
  (``FOLLOWUP_RETAIN_*_DAYS``), recorded in the audit as the machine's own.
- ``housekeeping_backup`` (03:45): ``followup backup`` into ``FOLLOWUP_BACKUP_DIR`` (default
  ``FOLLOWUP_HOME/backups``), a new file each night; the newest ``FOLLOWUP_BACKUP_KEEP`` (7) are
  kept. A backup that fails fails its run, and the ``alerts`` sensor mails the failure to the
  operations list like any failed run.

Each op runs the machine's own command (``python -m followup_pipeline.cli``) in a process of its
own, with the run's environment: what a nightly purge or backup does is what the CLI does.

- ``dead_runs`` (every 30 s): fails a started run whose process is gone (``engine/reaper.py``):
  no presence in Postgres for ``FOLLOWUP_DEAD_RUN_AFTER_S`` (docs/reliability.md).
"""

import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime

import dagster as dg

from followup_pipeline.engine.reaper import dead_runs_tick
from followup_pipeline.engine.runs import RunCounts, outcome_output, time_limit
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings

#: The longest a nightly purge or backup may take before its run is failed.
MAX_RUNTIME_S = 3 * 3600
#: The name of a nightly backup: sortable by time (only such files are ever removed).
BACKUP_NAME = "followup-{:%Y%m%d-%H%M%S}.tar"
NIGHTLY = re.compile(r"followup-\d{8}-\d{6}\.tar")
#: How often ``dead_runs`` looks for runs whose process is gone.
DEAD_RUNS_INTERVAL_S = 30


def followup(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run the machine's ``followup`` command, as this interpreter's module, with ``argv``, in
    a process group of its own: a run past ``MAX_RUNTIME_S`` is stopped with what it started
    (``pg_dump``) and fails."""
    command = [sys.executable, "-m", "followup_pipeline.cli", *argv]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=MAX_RUNTIME_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        err = f"stopped after {MAX_RUNTIME_S} s\n{err}"
        return subprocess.CompletedProcess(command, -signal.SIGKILL, out, err)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _done(
    context: dg.OpExecutionContext, what: str, done: subprocess.CompletedProcess[str]
) -> None:
    """Log what the command said; fail the run (and so alert) when it failed."""
    for line in done.stdout.splitlines():
        context.log.info(line)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-2000:]
        raise dg.Failure(description=f"the nightly {what} failed: {said}")


@dg.op
def purge_old(context: dg.OpExecutionContext) -> dg.Output[RunCounts]:
    """``followup purge`` with the retention settings."""
    done = followup("purge", "--by", "followup (schedule)", "--reason", "nightly housekeeping")
    _done(context, "purge", done)
    return outcome_output(context, "ok", {"purged": 1})


@dg.op
def back_up(
    context: dg.OpExecutionContext, settings: dg.ResourceParam[Settings], clock: ClockResource
) -> dg.Output[RunCounts]:
    """``followup backup`` into a new file; the oldest beyond ``backup_keep`` removed."""
    folder = settings.backups()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / BACKUP_NAME.format(clock.now())
    _done(context, "backup", followup("backup", str(target)))
    kept = sorted(p for p in folder.glob("followup-*.tar") if NIGHTLY.fullmatch(p.name))
    removed = 0
    for old in kept[: max(0, len(kept) - settings.backup_keep)]:
        old.unlink(missing_ok=True)
        removed += 1
    context.log.info("backup %s; %s older one(s) removed", target, removed)
    return outcome_output(
        context, "ok", {"written": 1, "removed": removed, "kept": len(kept) - removed}
    )


@dg.job(
    description="Nightly: followup purge with the retention settings.",
    tags=time_limit(MAX_RUNTIME_S, presence=False),
    executor_def=dg.in_process_executor,
)
def housekeeping_purge() -> None:
    purge_old()


@dg.job(
    description="Nightly: followup backup into the backups folder; the newest are kept.",
    tags=time_limit(MAX_RUNTIME_S, presence=False),
    executor_def=dg.in_process_executor,
)
def housekeeping_backup() -> None:
    back_up()


def build_defs(settings: Settings, *, cron: str | None = None) -> dg.Definitions:
    """The two jobs and their nightly schedules, on by default (``cron``: both on another
    schedule, for the daemon tests), and the ``dead_runs`` sensor."""
    purge = dg.ScheduleDefinition(
        name="purge_nightly",
        job=housekeeping_purge,
        cron_schedule=cron or "15 3 * * *",
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="03:15: followup purge (FOLLOWUP_RETAIN_*_DAYS).",
    )
    backup = dg.ScheduleDefinition(
        name="backup_nightly",
        job=housekeeping_backup,
        cron_schedule=cron or "45 3 * * *",
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="03:45: followup backup into FOLLOWUP_BACKUP_DIR, the newest kept.",
    )

    @dg.sensor(
        name="dead_runs",
        minimum_interval_seconds=DEAD_RUNS_INTERVAL_S,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Fails a started run whose process is gone (no presence in Postgres).",
    )
    def dead_runs(
        context: dg.SensorEvaluationContext, postgres: PostgresResource
    ) -> dg.SensorResult:
        """Fail the runs whose presence in Postgres is gone for FOLLOWUP_DEAD_RUN_AFTER_S."""
        # Real time, not the machine's clock: a process's death happens in real seconds.
        return dead_runs_tick(
            context,
            postgres,
            now=datetime.now(UTC),
            after_s=settings.dead_run_after_s,
            lease_s=settings.event_lease_s,
        )

    return dg.Definitions(
        jobs=[housekeeping_purge, housekeeping_backup],
        schedules=[purge, backup],
        sensors=[dead_runs],
        resources={"settings": settings},
    )
