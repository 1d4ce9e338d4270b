"""Alerts: failures, dead letters and a machine that stopped working reach a person, once.

- The ``alerts`` run-failure sensor (every job) records each failed run under its fingerprint
  (job, error type, message with numbers and ids normalised): the first of a fingerprint opens
  an alert, repeats within ``FOLLOWUP_ALERT_WINDOW_H`` are held and counted by the next one.
- The ``alert_checks`` sensor records new dead letters (one alert row each, named by its
  ``event:``/``action:`` name, those of one tick in one mail), the oldest event pending longer
  than ``FOLLOWUP_ALERT_PENDING_AFTER_MIN``, and business hours without a successful
  ``evaluate`` for ``FOLLOWUP_ALERT_EVALUATE_SILENCE_H``; and it launches one ``alert`` run per
  alert that reached nobody yet (run key = the alert's ledger key, again every 15 minutes while
  it stays unsent).
- The ``alert`` job mails the owner and backup through Graph, once per ledger key; when mail
  fails it creates a task in the operations list in ClickUp. A failed ``alert`` run is reported
  to ClickUp only, by the sensor itself, and never raises an alert.
"""

import re
from datetime import UTC, datetime, timedelta

import dagster as dg

from followup_pipeline.defs.alerts.checks import dead_letter_signals, pending_signal, stale_signal
from followup_pipeline.defs.alerts.delivery import (
    AlertDelivery,
    AlertNotSent,
    Delivered,
    OpsBoard,
    clickup_key,
    ui_url,
)
from followup_pipeline.defs.common import RunCounts, calendar_of, outcome_output
from followup_pipeline.domain.alerts import fingerprint
from followup_pipeline.integrations.resources import ClickUpResource, OutlookResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import alerts as store

ALERT_JOB = "alert"
#: How often an alert that reached nobody is tried again by a new ``alert`` run.
RETRY_EVERY = timedelta(minutes=15)
ALERT_TAG = "followup/alert"


class AlertConfig(dg.Config):
    """``alert_keys``: the ledger keys of the alerts to send (``followup alerts list``)."""

    alert_keys: list[str]


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


def retry_slot(first_at: datetime, now: datetime) -> int:
    """Which 15-minute retry an unsent alert is at (0 until 15 minutes after it was raised)."""
    return max(0, int((now - first_at) / RETRY_EVERY))


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``alerts`` and ``alert_checks`` sensors and the ``alert`` job."""

    @dg.op
    def send_alerts(
        context: dg.OpExecutionContext,
        config: AlertConfig,
        postgres: PostgresResource,
        outlook: OutlookResource,
        ops_clickup: ClickUpResource,
        clock: ClockResource,
    ) -> dg.Output[RunCounts]:
        """Send each alert of ``alert_keys`` by mail, or as a ClickUp task when mail fails."""
        board = ops_clickup.get_client() if settings.ops_clickup_list_id else None
        delivery = AlertDelivery(
            postgres,
            outlook.get_client(),
            board,
            settings,
            now=clock.now(),
            run_id=context.run_id,
            log=context.log,
        )
        done: list[Delivered] = []
        failed: list[str] = []
        for key in config.alert_keys:
            try:
                done.append(delivery.deliver(key))
            except AlertNotSent as error:
                context.log.error(str(error))
                failed.append(str(error))
        counts: RunCounts = {
            "mailed": sum(d.channel == "mail" for d in done),
            "clickup": sum(d.channel == "clickup" for d in done),
            "in_flight": sum(d.channel == "in_flight" for d in done),
            "not_sent": len(failed),
        }
        if failed:
            raise dg.Failure(
                description="; ".join(failed),
                metadata={key: dg.MetadataValue.int(int(v)) for key, v in counts.items()},
            )
        if counts["clickup"] or counts["in_flight"]:
            return outcome_output(context, "partial", counts)
        return outcome_output(context, "ok", counts)

    @dg.job(
        name=ALERT_JOB,
        description="Sends alerts to the operations owner and backup (ClickUp when mail fails).",
    )
    def alert() -> None:
        send_alerts()

    @dg.run_failure_sensor(
        monitor_all_code_locations=True,
        name="alerts",
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def alerts(
        context: dg.RunFailureSensorContext,
        postgres: PostgresResource,
        clock: ClockResource,
        ops_clickup: ClickUpResource,
    ) -> None:
        """Record every failed run under its fingerprint; the first of a window goes out. A
        failed ``alert`` run goes to the operations list in ClickUp only."""
        run = context.dagster_run
        message = context.failure_event.message or "run failed"
        error_type, detail = _first_error(context.instance, run.run_id, message)
        now = clock.now()
        if run.job_name == ALERT_JOB:
            _report_alert_failure(context, postgres, ops_clickup, run.run_id, detail, now)
            return
        with postgres.connection() as conn:
            recorded = store.record(
                conn,
                store.Signal(
                    kind="run_failure",
                    source=f"run:{run.run_id}",
                    fingerprint=fingerprint(run.job_name, error_type, detail),
                    subject=run.job_name,
                    message=f"{error_type}: {detail}",
                    occurred_at=now,
                    run_id=run.run_id,
                ),
                window=settings.alert_window(),
            )
        if recorded is not None and recorded.key is None:
            context.log.info("%s failed again: held back (an alert went out already)", run.run_id)

    def _report_alert_failure(
        context: dg.RunFailureSensorContext,
        postgres: PostgresResource,
        ops_clickup: ClickUpResource,
        run_id: str,
        detail: str,
        now: datetime,
    ) -> None:
        if not settings.ops_clickup_list_id:
            context.log.error("alert run %s failed: %s (no operations list set)", run_id, detail)
            return
        key = clickup_key(f"alert:self:{run_id}")
        board = OpsBoard(postgres, ops_clickup.get_client(), settings, now=now, run_id=None)
        markdown = (
            f"The alert run {run_id} failed: {detail}\n\n"
            f"Open it: {ui_url(settings)}/runs/{run_id}\n"
            "The alerts it carried are tried again every 15 minutes; see them with "
            "`followup alerts list`.\n"
        )
        try:
            board.post_once(
                key, name=f"[followup] alert run failed: {detail[:150]}", markdown=markdown
            )
        except AlertNotSent as error:
            context.log.error("alert run %s failed, and so did ClickUp: %s", run_id, error)

    @dg.sensor(
        name="alert_checks",
        job=alert,
        minimum_interval_seconds=settings.alerts_sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def alert_checks(
        context: dg.SensorEvaluationContext, postgres: PostgresResource, clock: ClockResource
    ) -> dg.SensorResult:
        """Record new dead letters, a pending event past its threshold and a silent
        ``evaluate``; launch an ``alert`` run for each alert that reached nobody yet."""
        now = clock.now()
        watching_since = _watching_since(context.cursor, now)
        last_ok = _last_evaluate_success(context.instance)
        calendar = calendar_of(postgres, settings)
        with postgres.connection() as conn:
            store.record_dead_letters(conn, dead_letter_signals(conn, settings), at=now)
            for signal in (
                pending_signal(store.oldest_pending_event(conn), now=now, settings=settings),
                stale_signal(
                    last_ok,
                    now=now,
                    watching_since=watching_since,
                    settings=settings,
                    calendar=calendar,
                ),
            ):
                if signal is not None:
                    store.record(conn, signal, window=settings.alert_window())
            waiting = store.unsent(conn)
        requests = [
            dg.RunRequest(
                run_key=f"{item.key}#{retry_slot(item.first_at, now)}",
                run_config=dg.RunConfig(ops={"send_alerts": AlertConfig(alert_keys=[item.key])}),
                tags={ALERT_TAG: item.key},
            )
            for item in waiting
        ]
        # The cursor keeps when the checks first ran on this machine.
        return dg.SensorResult(run_requests=requests, cursor=watching_since.isoformat())

    return dg.Definitions(jobs=[alert], sensors=[alerts, alert_checks])


def _watching_since(cursor: str | None, now: datetime) -> datetime:
    """When the checks first ran on this machine (kept in the sensor's cursor); now at first."""
    try:
        since = datetime.fromisoformat(cursor) if cursor else now
    except ValueError:
        return now
    return since if since.tzinfo is not None else now


def _last_evaluate_success(instance: dg.DagsterInstance) -> datetime | None:
    """When the latest successful ``evaluate`` run ended."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name="evaluate", statuses=[dg.DagsterRunStatus.SUCCESS]),
        limit=1,
        order_by="update_timestamp",
        ascending=False,
    )
    if not records:
        return None
    record = records[0]
    ended = record.end_time or record.update_timestamp.timestamp()
    return datetime.fromtimestamp(ended, tz=UTC)
