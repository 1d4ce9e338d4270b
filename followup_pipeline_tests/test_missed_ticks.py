"""Ticks missed while the daemon was down, on the instance of the root ``dagster.yaml``: one
iteration of Dagster's scheduler (what the daemon does every minute) after a simulated downtime,
on the machine's own schedules.

Dagster 1.13 runs the latest missed tick of each schedule and only that one, late, with that
tick's time and partition: for a schedule of an unpartitioned job (``enrich_hourly``), of a
partitioned one (``evaluate_business_hours``, ``morning_report_weekdays``) and for the one that
``build_schedule_from_partitioned_job`` makes (``weekly_report_friday``) alike. A tick whose
evaluation failed is tried again at the next iteration (``max_tick_retries``).

Dagster has no public API for a scheduler iteration: this module uses its test helpers and the
iteration function the daemon runs (private modules; the package itself imports none).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg
import pytest
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._scheduler.scheduler import launch_scheduled_runs
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.engine import runs as engine_runs
from followup_pipeline.machine import LOCATION, install_dagster_home
from followup_pipeline.settings import load_settings

from .conftest import with_database

# Dagster's own code, run in this process here, uses two of its deprecated APIs: its snapshot of
# a schedule reads ScheduleDefinition.environment_vars, and the schedule function of
# build_schedule_from_partitioned_job calls JobDefinition.run_request_for_partition.
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Property `ScheduleDefinition.environment_vars` is deprecated:DeprecationWarning"
    ),
    pytest.mark.filterwarnings(
        "ignore:Function `JobDefinition.run_request_for_partition` is deprecated:DeprecationWarning"
    ),
]
#: The code location, loaded in this process: the machine's definitions on the test's settings.
LOCATION_FILE = """from followup_pipeline.defs import build_definitions
from followup_pipeline.settings import load_settings

defs = build_definitions(load_settings())
"""
BERLIN = ZoneInfo("Europe/Berlin")
#: The daemon's last iteration before it went down: Thursday 5 March 2026, 10:05 in Berlin.
DOWN = datetime(2026, 3, 5, 10, 5, tzinfo=BERLIN)
#: Back on Saturday 14 March, 12:00: seven business days of ticks missed, two Fridays among them.
BACK = datetime(2026, 3, 14, 12, 0, tzinfo=BERLIN)
SECRETS = (
    "FOLLOWUP_ESPOCRM_API_KEY",
    "FOLLOWUP_CLICKUP_TOKEN",
    "FOLLOWUP_GRAPH_CLIENT_SECRET",
    "FOLLOWUP_MISTRAL_API_KEY",
)
NOT_CAUGHT_UP = "has no partition set, so not trying to catch up"
SCHEDULED_TAG = ".dagster/scheduled_execution_time"


class Scheduler:
    """Dagster's scheduler on an instance and a workspace, iterated at frozen times."""

    def __init__(self, instance: dg.DagsterInstance, context: WorkspaceProcessContext) -> None:
        self.instance = instance
        self.context = context
        self.iteration_times: dict[str, Any] = {}

    def iterate(self, now: datetime, *, restarted: bool = False) -> list[Any]:
        """One iteration at ``now`` (``restarted``: by a daemon that just started, which knows
        nothing of earlier iterations); the errors it reported."""
        if restarted:
            self.iteration_times = {}
        settings = self.instance.scheduler
        with freeze_time(now):
            reported = list(
                launch_scheduled_runs(
                    self.context,
                    logging.getLogger("followup_tests.scheduler"),
                    end_datetime_utc=now.astimezone(UTC),
                    iteration_times=self.iteration_times,
                    max_catchup_runs=settings.max_catchup_runs,  # type: ignore[union-attr]
                    max_tick_retries=settings.max_tick_retries,  # type: ignore[union-attr]
                )
            )
        return [error for error in reported if error is not None]

    def ticks(self) -> dict[str, int]:
        """How many ticks each schedule has recorded."""
        return {
            state.instigator_name: len(
                self.instance.get_ticks(state.instigator_origin_id, state.selector_id)
            )
            for state in self.instance.all_instigator_state()
        }

    def runs(self) -> dict[str, list[tuple[datetime, str | None]]]:
        """Each schedule's runs: (the tick's time, the partition)."""
        found: dict[str, list[tuple[datetime, str | None]]] = {}
        for run in self.instance.get_runs():
            name = run.tags["dagster/schedule_name"]
            tick = datetime.fromisoformat(run.tags[SCHEDULED_TAG])
            found.setdefault(name, []).append((tick, run.tags.get("dagster/partition")))
        return found


@pytest.fixture
def scheduler(
    tmp_path: Path,
    db_url: str,
    database_factory: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Scheduler]:
    """The machine's instance (installed from the root dagster.yaml, storage in a fresh Postgres
    database) and its schedules in a code location named as the machine's."""
    storage = database_factory()
    name = str(conninfo_to_dict(storage)["dbname"])
    monkeypatch.setenv(
        "FOLLOWUP_DAGSTER_PG_URL", with_database(storage, name, driver="postgresql+psycopg2")
    )
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_PARTITIONS_START", "2026-01-01")
    # A run's plan resolves every resource's config: the secrets, as `followup dev` gives them to
    # Dagster's processes (nothing is sent anywhere here).
    for secret in SECRETS:
        monkeypatch.setenv(secret, "unused")
    monkeypatch.setenv("DAGSTER_HOME", str(install_dagster_home(load_settings())))
    location = tmp_path / "missed_ticks_location.py"
    location.write_text(LOCATION_FILE, encoding="utf-8")
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(
            python_file=str(location), attribute="defs", working_directory=str(tmp_path)
        ),
        location_name=LOCATION,
    )
    with (
        dg.DagsterInstance.get() as instance,
        create_test_daemon_workspace_context(
            InProcessWorkspaceLoadTarget(origin), instance
        ) as context,
    ):
        yield Scheduler(instance, context)


def test_missed_ticks_only_the_latest_of_each_schedule_runs(
    scheduler: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    assert scheduler.instance.scheduler.max_catchup_runs == 1  # type: ignore[union-attr]
    assert scheduler.iterate(DOWN) == []
    assert scheduler.runs() == {}

    with caplog.at_level(logging.INFO, logger="followup_tests.scheduler"):
        assert scheduler.iterate(BACK, restarted=True) == []
    # Dozens of ticks missed (every business hour, two Fridays): one run each, the latest.
    friday = datetime(2026, 3, 13, tzinfo=BERLIN)
    assert scheduler.runs() == {
        "evaluate_business_hours": [(friday.replace(hour=18), "2026-03-13-18:00")],
        "enrich_hourly": [(friday.replace(hour=23, minute=30), None)],
        "morning_report_weekdays": [(friday.replace(hour=7, minute=30), "2026-03-13")],
        "weekly_report_friday": [(friday.replace(hour=15), "2026-03-13")],
        # Every night, weekends too: the latest missed night is Saturday's.
        "crm_changes_nightly": [(friday.replace(day=14, hour=2), None)],
        # Every quarter hour: the latest is the one just before the machine came back.
        "lms_reminders_every_15_min": [(friday.replace(day=14, hour=12), None)],
        "lms_weekly_monday": [(friday.replace(day=9, hour=7), None)],
    }
    # Not max_catchup_runs: every schedule built from code counts as one without partitions
    # (each that missed more than one tick says so; the weekly mail missed one).
    assert sum(NOT_CAUGHT_UP in message for message in caplog.messages) == 6, caplog.messages

    # The missed ticks left no record, and the daemon does not come back to them.
    assert scheduler.ticks() == dict.fromkeys(scheduler.runs(), 1)
    assert scheduler.iterate(datetime(2026, 3, 15, 23, 59, tzinfo=BERLIN), restarted=True) == []
    # Only Sunday night's sweep and the latest quarter hour are new (the business-day schedules
    # skip the weekend).
    runs = scheduler.runs()
    assert sum(len(runs) for runs in runs.values()) == 9
    assert runs["crm_changes_nightly"][0][0] == datetime(2026, 3, 15, 2, 0, tzinfo=BERLIN)


def test_missed_ticks_a_failed_tick_is_tried_again(
    scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert scheduler.instance.scheduler.max_tick_retries >= 1  # type: ignore[union-attr]
    assert scheduler.iterate(datetime(2026, 3, 5, 10, 35, tzinfo=BERLIN)) == []
    failures: list[str] = []
    calendar = engine_runs.business_calendar

    def failing_once(*args: Any) -> Any:
        if not failures:
            failures.append("failed")
            raise RuntimeError("the calendar failed once")
        return calendar(*args)

    monkeypatch.setattr(engine_runs, "business_calendar", failing_once)
    # 11:00's tick of evaluate fails (and would be lost with max_tick_retries: 0) ...
    (error,) = scheduler.iterate(datetime(2026, 3, 5, 11, 0, 30, tzinfo=BERLIN))
    assert "the calendar failed once" in str(error)
    eleven = datetime(2026, 3, 5, 11, 0, tzinfo=BERLIN)
    quarter = {"lms_reminders_every_15_min": [(eleven, None)]}  # its own tick, unaffected
    assert scheduler.runs() == quarter
    # ... and is evaluated again at the next iteration, a minute later: its run, its partition.
    assert scheduler.iterate(datetime(2026, 3, 5, 11, 1, 30, tzinfo=BERLIN)) == []
    assert scheduler.runs() == {
        "evaluate_business_hours": [(eleven, "2026-03-05-11:00")],
        **quarter,
    }
