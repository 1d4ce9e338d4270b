"""Alerts: failures, dead letters and a machine that stopped working reach a person, once.

- The ``alerts`` run-failure sensor (every job) records each failed run under its fingerprint
  (job, error type, message with numbers and ids normalised): the first of a fingerprint opens
  an alert, repeats within ``FOLLOWUP_ALERT_WINDOW_H`` are held and counted by the next one.
- The ``alert_checks`` sensor records what that sensor missed (a failed run it could not record,
  say with Postgres down: Dagster moves its cursor on regardless), new dead letters, a lag of
  pending events past ``FOLLOWUP_ALERT_PENDING_AFTER_MIN`` (one alert per episode), and business
  hours without a successful ``evaluate`` for ``FOLLOWUP_ALERT_EVALUATE_SILENCE_H`` (one per
  silence); and it launches an ``alert`` run for each alert that reached nobody yet, again after
  15 min, 30 min, 1 h, 2 h, then every 4 h while it stays unsent.
- Dead letters: each new one is one alert row, named by its ``event:``/``action:`` name. It goes
  out in an alert of its own (its own key and mail, with its step and last error) while fewer
  than ``FOLLOWUP_ALERT_DEAD_LETTERS_PER_WINDOW`` went out within ``FOLLOWUP_ALERT_WINDOW_H``;
  past that it is held. The held ones go out together in one digest (one key, one mail that
  counts and names them) once no dead-letter mail went out for an hour: an outage sends the
  limit's mails, then one digest an hour counting that hour's dead letters, and every dead
  letter ends in a mail. Those there before the checks first ran are recorded without an alert.
- ``ops_weekly`` (``ops_week.py``): on Monday morning, the week's look at what failed and why,
  what waits for whom, suppressions, degraded runs, the census and the account, to the owner.
- The ``alert`` job mails the owner and backup through Graph, once per ledger key; when mail
  fails it creates a task in the operations list in ClickUp. A failed ``alert`` run is reported
  to ClickUp only, by the sensor itself, one task per kind of failure and window, and never
  raises an alert.
"""

import dagster as dg

from followup_pipeline.defs.alerts.ops_week import ops_weekly
from followup_pipeline.defs.alerts.send import alert
from followup_pipeline.defs.alerts.sensors import check_tick, record_failure
from followup_pipeline.integrations.resources import ClickUpResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import Settings


def build_defs(settings: Settings) -> dg.Definitions:
    """The ``alerts`` and ``alert_checks`` sensors, the ``alert`` job, and the weekly operations
    look (``ops_weekly``, Monday 07:15 in the team's zone)."""

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
        record_failure(context, postgres, clock, ops_clickup, settings)

    @dg.sensor(
        name="alert_checks",
        job=alert,
        minimum_interval_seconds=settings.alerts_sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def alert_checks(
        context: dg.SensorEvaluationContext, postgres: PostgresResource, clock: ClockResource
    ) -> dg.SensorResult:
        """Record what the ``alerts`` sensor missed, new dead letters, a lag of pending events
        and a silent ``evaluate``; launch an ``alert`` run for each alert that reached nobody."""
        return check_tick(context, postgres, clock, settings)

    weekly = dg.ScheduleDefinition(
        name="ops_weekly_monday",
        job=ops_weekly,
        cron_schedule="15 7 * * 1",
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Monday 07:15: the week's operations look to the operations owner.",
    )
    return dg.Definitions(
        jobs=[alert, ops_weekly],
        schedules=[weekly],
        sensors=[alerts, alert_checks],
        resources={"settings": settings},
    )
