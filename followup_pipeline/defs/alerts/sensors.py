"""What the two alert sensors do on each tick: ``record_failure`` for the run-failure sensor
``alerts``, ``check_tick`` for ``alert_checks`` (see the package's docstring)."""

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import psycopg

from followup_pipeline.defs.alerts.board import AlertNotSent, OpsBoard, clickup_key
from followup_pipeline.defs.alerts.checks import (
    census_signals,
    pending_signal,
    stale_signal,
    work_signals,
)
from followup_pipeline.defs.alerts.degraded import (
    LOOK_BACK,
    READ_RUNS,
    degraded_signal,
    episode_of,
    recovered_signal,
)
from followup_pipeline.defs.alerts.send import ALERT_JOB, AlertConfig
from followup_pipeline.domain.account import GRACE
from followup_pipeline.domain.alerts import fingerprint, self_alert_key
from followup_pipeline.domain.text import cut_at_word
from followup_pipeline.domain.watchdog import LOOKED, watchdog_silent
from followup_pipeline.engine import work
from followup_pipeline.engine.ledger import DryRun
from followup_pipeline.engine.runs import (
    calendar_of,
    jobs_degraded_since,
    last_clean_run,
    recent_outcomes,
)
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.resources import ClickUpResource
from followup_pipeline.machine import ui_url
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import alerts as store
from followup_pipeline.store import census
from followup_pipeline.store import work as work_store
from followup_pipeline.store.enrichments import cursor_of

ALERT_TAG = "followup/alert"
#: When an alert that reached nobody is tried again, counted from when it was recorded; then
#: every ``RETRY_EVERY_LAST``.
RETRIES = (timedelta(minutes=15), timedelta(minutes=30), timedelta(hours=1), timedelta(hours=2))
RETRY_EVERY_LAST = timedelta(hours=4)
#: How far back ``alert_checks`` looks for failed runs the ``alerts`` sensor did not record.
MISSED_RUNS_LOOKBACK = timedelta(hours=6)
#: How long a failed run is left to the ``alerts`` sensor before the checks record it.
SENSOR_FIRST = timedelta(minutes=2)
#: How far back the census is read to know whether a quiet stage had deals.
CENSUS_LOOK_BACK = timedelta(days=120)


def _first_error(instance: dg.DagsterInstance, run_id: str, fallback: str) -> tuple[str, str]:
    """The type and message of the run's first failed step's own error (under Dagster's
    wrapper); the run's failure message when no step failed (a run that never started)."""
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    event = records[0].dagster_event if records else None
    error = getattr(event.event_specific_data, "error", None) if event else None
    while error is not None and error.cause is not None and error.cls_name.startswith("Dagster"):
        error = error.cause
    if error is None:
        return "RunFailure", fallback
    kind = str(error.cls_name)
    # The message repeats the class, qualified or not ("dagster._core….Failure: …").
    prefix = re.compile(rf"^(?:[\w.]+\.)?{re.escape(kind)}: ")
    return kind, prefix.sub("", str(error.message).strip(), count=1)


def failure_signal(
    instance: dg.DagsterInstance, run: dg.DagsterRun, message: str, now: datetime
) -> store.Signal:
    """What a failed run raises: its fingerprint, its job, its first step's error."""
    error_type, detail = _first_error(instance, run.run_id, message)
    return store.Signal(
        kind="run_failure",
        source=f"run:{run.run_id}",
        fingerprint=fingerprint(run.job_name, error_type, detail),
        subject=run.job_name,
        message=f"{error_type}: {detail}",
        occurred_at=now,
        run_id=run.run_id,
    )


def retry_slot(age: timedelta) -> int:
    """How many retries are due for an unsent alert recorded ``age`` ago (0 at first)."""
    slot = sum(age >= at for at in RETRIES)
    if age >= RETRIES[-1]:
        slot += int((age - RETRIES[-1]) / RETRY_EVERY_LAST)
    return slot


def record_failure(
    context: dg.RunFailureSensorContext,
    postgres: PostgresResource,
    clock: ClockResource,
    ops_clickup: ClickUpResource,
    settings: Settings,
) -> None:
    """Record every failed run under its fingerprint; the first of a window goes out. A
    failed ``alert`` run goes to the operations list in ClickUp only."""
    run = context.dagster_run
    message = context.failure_event.message or "run failed"
    now = clock.now()
    if run.job_name == ALERT_JOB:
        report_alert_failure(context, postgres, ops_clickup, settings, run.run_id, message, now)
        return
    signal = failure_signal(context.instance, run, message, now)
    with postgres.connection() as conn:
        recorded = store.record(conn, signal, window=settings.alert_window())
    if recorded is not None and recorded.key is None:
        context.log.info("%s failed again: held back (an alert went out already)", run.run_id)


def report_alert_failure(
    context: dg.RunFailureSensorContext,
    postgres: PostgresResource,
    ops_clickup: ClickUpResource,
    settings: Settings,
    run_id: str,
    message: str,
    now: datetime,
) -> None:
    _, detail = _first_error(context.instance, run_id, message)
    if not settings.ops_clickup_list_id:
        context.log.error("alert run %s failed: %s (no operations list set)", run_id, detail)
        return
    key = clickup_key(self_alert_key(detail, now, settings.alert_window()))
    run = RunScope(now, None, context.log)
    board = OpsBoard(run, postgres, ops_clickup.get_client(), settings)
    markdown = (
        f"The alert run {run_id} failed: {detail}\n\n"
        f"Open it: {ui_url(settings)}/runs/{run_id}\n\n"
        "The alerts it carried are tried again (after 15 min, 30 min, 1 h, 2 h, then every "
        "4 h); see them with `followup alerts list`. Further failures like this one within "
        f"{settings.alert_window_h:g} h are not reported again.\n"
    )
    try:
        name = f"[followup] alert run failed: {cut_at_word(detail, 150)}"
        board.post_once(key, name=name, markdown=markdown)
    except DryRun:
        return
    except AlertNotSent as error:
        context.log.error("alert run %s failed, and so did ClickUp: %s", run_id, error)


def check_tick(
    context: dg.SensorEvaluationContext,
    postgres: PostgresResource,
    clock: ClockResource,
    settings: Settings,
) -> dg.SensorResult:
    """Record what the ``alerts`` sensor missed, new items of the list of work waiting for a
    person, a lag of pending events, a silent ``evaluate`` and jobs that keep ending ``partial``
    (and their recovery); launch an ``alert`` run for each alert that reached nobody."""
    now = clock.now()
    first_tick = not context.cursor
    state = _cursor(context.cursor, now)
    clean = last_clean_run(context.instance, "evaluate")
    last_ok = clean.ended if clean is not None else None
    calendar = calendar_of(postgres, settings)
    missed = _failed_runs(context.instance)
    with postgres.connection() as conn:
        known = store.recorded(conn, [f"run:{run.run_id}" for run in missed])
        for run in missed:
            if f"run:{run.run_id}" not in known:
                failure = failure_signal(context.instance, run, "run failed", now)
                store.record(conn, failure, window=settings.alert_window())
        # The list of work waiting for a person is brought up to date, and each failure of an
        # open item not alerted yet raises a signal. Each dead letter has an alert of its own up
        # to the window's limit; the rest are held for a digest an hour after the last such
        # mail. On the first tick, the items already there are not news: on the record, without
        # an alert (`followup work list` has them).
        work.sync(conn, settings, at=now)
        items = work_store.to_alert(conn)
        if _ends_partial(context.instance, "evaluate", within=GRACE["step"]):
            # A vendor keeps evaluate from the steps: its own alert names the vendor and what
            # waits; the late steps are mailed only if they still wait once it runs clean (or
            # stops running: then they are, and the silent evaluate is an alert of its own).
            items = [item for item in items if item.kind != "step"]
        letters, catch_up = work_signals(items)
        store.record_dead_letters(
            conn,
            letters,
            at=now,
            limit=settings.alert_dead_letters_per_window,
            window=settings.alert_window(),
            known=first_tick,
        )
        # Each learning item, once, to its owner too.
        for item in catch_up:
            store.record(conn, item, window=settings.alert_window())
        for alerted in items:
            work_store.mark_alerted(conn, alerted.id, alerted.failures)
        lag = pending_signal(
            store.oldest_pending_event(conn),
            now=now,
            settings=settings,
            episode=state.get("lag_since"),
        )
        state["lag_since"] = lag.occurred_at.isoformat() if lag is not None else None
        silence = stale_signal(
            last_ok,
            now=now,
            watching_since=datetime.fromisoformat(str(state["watching_since"])),
            settings=settings,
            calendar=calendar,
        )
        for episode in (lag, silence):
            if episode is not None:
                store.record(conn, episode, window=None)
        # The watchdog watched in turn: one alert a silence (its source names its last look).
        looked = cursor_of(conn, LOOKED)
        silent = watchdog_silent(looked, now=datetime.now(UTC), every_s=settings.watchdog_every_s)
        if silent is not None and looked is not None:
            signal = store.stall_signal(
                silent.id, silent.subject, silent.message, since=looked, at=now
            )
            store.record(conn, signal, window=None)
        # A watched stage gone quiet: one alert a quiet spell (its source names when it began).
        rows = census.since(conn, now.date() - CENSUS_LOOK_BACK, zone=settings.timezone)
        for quiet in census_signals(rows, now=now, settings=settings, calendar=calendar):
            store.record(conn, quiet, window=None)
        # One alert an episode; a vendor that comes and goes within the alert window is held
        # and counted in the next alert of the job rather than mailed each time.
        for signal in degraded_signals(context.instance, conn, settings):
            store.record(conn, signal, window=settings.alert_window())
        waiting = store.unsent(conn)
    if waiting and not (settings.ops_recipients() or settings.ops_clickup_list_id):
        context.log.error(
            "%s alert(s) wait: set FOLLOWUP_OPS_OWNER, FOLLOWUP_OPS_BACKUP and "
            "FOLLOWUP_OPS_CLICKUP_LIST_ID (nobody to send them to)",
            len(waiting),
        )
        waiting = []
    requests = [
        dg.RunRequest(
            run_key=f"{item.key}#{retry_slot(timedelta(seconds=item.age_s))}",
            run_config=dg.RunConfig(ops={"send_alerts": AlertConfig(alert_keys=[item.key])}),
            tags={ALERT_TAG: item.key},
        )
        for item in waiting
    ]
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(state))


def _cursor(cursor: str | None, now: datetime) -> dict[str, str | None]:
    """The checks' state: when they first ran on this machine (a machine started at 10:30 is not
    silent since 07:00), and since when events lag (one alert per episode)."""
    try:
        state = json.loads(cursor) if cursor else {}
        since = datetime.fromisoformat(state["watching_since"])
    except (ValueError, KeyError, TypeError):
        return {"watching_since": now.isoformat(), "lag_since": None}
    if since.tzinfo is None:
        since = now
    lag = state.get("lag_since")
    return {"watching_since": since.isoformat(), "lag_since": lag if isinstance(lag, str) else None}


def _failed_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """Runs that failed lately (by Dagster's clock), ``alert`` runs left out; not those of the
    last two minutes, which the ``alerts`` sensor records with their failure message."""
    now = datetime.now(UTC)
    records = instance.get_run_records(
        filters=dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.FAILURE],
            updated_after=now - MISSED_RUNS_LOOKBACK,
            updated_before=now - SENSOR_FIRST,
        ),
        limit=200,
    )
    return [r.dagster_run for r in records if r.dagster_run.job_name != ALERT_JOB]


def _ends_partial(instance: dg.DagsterInstance, job: str, *, within: timedelta) -> bool:
    """Whether the latest run of ``job`` ended ``partial``, ``within`` the last while
    (Dagster's clock: the runs' times are its own)."""
    latest = recent_outcomes(instance, job, limit=1)
    return (
        bool(latest)
        and latest[0].outcome == "partial"
        and (datetime.now(UTC) - latest[0].ended <= within)
    )


def _late_steps(conn: psycopg.Connection[Any]) -> str:
    """What ``evaluate``'s degraded alert says of the follow-up steps it keeps waiting."""
    late = sum(c.items for c in work_store.counts(conn) if c.kind == "step")
    hours = int(GRACE["step"].total_seconds() // 3600)
    return (
        f"Due follow-up steps wait; each later than {hours} h goes on the list of work with the "
        f"operations owner ({late} now: followup work list --kind step)"
    )


def degraded_signals(
    instance: dg.DagsterInstance, conn: psycopg.Connection[Any], settings: Settings
) -> list[store.Signal]:
    """For each job with a ``partial`` run lately that skipped work for a vendor, or whose
    degraded alert has no "recovered" yet: the "recovered" once its latest run ended clean
    after that alert, else, with none open, its episode's alert once it lasted long enough
    (``defs/alerts/degraded.py``). Dagster's clock: the runs' times are its own."""
    now = datetime.now(UTC)
    alerted = store.degraded_open(conn)
    jobs = jobs_degraded_since(instance, now - LOOK_BACK) | set(alerted)
    signals: list[store.Signal] = []
    for job in sorted(jobs - {ALERT_JOB}):
        runs = recent_outcomes(instance, job, limit=READ_RUNS)
        if not runs:
            continue
        found: store.Signal | None
        if job in alerted:
            found = recovered_signal(job, alerted[job], runs[0], now=now, zone=settings.timezone)
        else:
            episode = episode_of(job, runs)
            found = (
                degraded_signal(
                    episode,
                    now=now,
                    runs=settings.alert_degraded_runs,
                    hours=settings.alert_degraded_h,
                    zone=settings.timezone,
                    note=_late_steps(conn) if job == "evaluate" else "",
                )
                if episode is not None
                else None
            )
        if found is not None:
            signals.append(found)
    return signals
