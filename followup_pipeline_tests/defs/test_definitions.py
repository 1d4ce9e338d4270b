"""The one Definitions: every job, schedule and sensor resolves; the instance lives in Postgres."""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.defs import build_definitions
from followup_pipeline.engine.runs import MAX_RUNTIME_TAG, OUTCOME_TAG, SINGLETON_TAG
from followup_pipeline.first_runs import note_first_day
from followup_pipeline.integrations.resources import EspoCrmResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import ConfigError, load_settings

from ..conftest import with_database

JOBS = [
    "register",
    "evaluate",
    "enrich",
    "morning_report",
    "weekly_report",
    "replay",
    "watch_control",
    "review",
    "alert",
    "ops_weekly",
    "lead_intake",
    "crm_changes",
    "lms_reminders",
    "lms_weekly",
    "housekeeping_purge",
    "housekeeping_backup",
]
SCHEDULES = [
    "evaluate_business_hours",
    "enrich_hourly",
    "morning_report_weekdays",
    "weekly_report_friday",
    "crm_changes_nightly",
    "lms_reminders_every_15_min",
    "lms_weekly_monday",
    "ops_weekly_monday",
    "purge_nightly",
    "backup_nightly",
]
SENSORS = ["crm_events", "alerts", "alert_checks", "lead_events", "dead_runs"]


@pytest.fixture
def defs() -> dg.Definitions:
    """The machine's definitions on default settings (partitions from January, for the ticks
    of March below)."""
    return build_definitions(load_settings(partitions_start="2026-01-01"))


def _tick(
    defs: dg.Definitions, schedule: dg.ScheduleDefinition, tick: datetime, db_url: str
) -> dg.ScheduleExecutionData:
    """One evaluation of ``schedule`` at ``tick``, its holidays read from the test's database."""
    with (
        dg.instance_for_test() as instance,
        dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=tick,
            repository_def=defs.get_repository_def(),
            resources={"postgres": PostgresResource(url=db_url)},
        ) as context,
    ):
        return schedule.evaluate_tick(context)


def test_definitions_load_as_a_code_location_would() -> None:
    # What the code server does: one Definitions at module scope, names unique across graphs.
    module = importlib.import_module("followup_pipeline.definitions")
    dg.Definitions.validate_loadable(module.defs)
    found = [name for name, value in vars(module).items() if isinstance(value, dg.Definitions)]
    assert found == ["defs"]


def test_definitions_resolve_every_job_schedule_and_sensor(defs: dg.Definitions) -> None:
    repository = defs.get_repository_def()
    assert sorted(job.name for job in repository.get_all_jobs()) == sorted(JOBS)
    for name in JOBS:
        assert defs.resolve_job_def(name).name == name
    for name in SCHEDULES:
        assert defs.resolve_schedule_def(name).name == name
    for name in SENSORS:
        assert defs.resolve_sensor_def(name).name == name
    assert {
        "postgres",
        "clock",
        "espocrm",
        "clickup",
        "ops_clickup",
        "outlook",
        "mistral",
        "moodle",
    } <= set(repository.get_top_level_resources())


def test_definitions_every_schedule_and_sensor_runs_by_default(defs: dg.Definitions) -> None:
    # Nothing is switched on by hand after `make run` (a state set in the UI wins afterwards).
    repository = defs.get_repository_def()
    assert sorted(s.name for s in repository.schedule_defs) == sorted(SCHEDULES)
    assert sorted(s.name for s in repository.sensor_defs) == sorted(SENSORS)
    for schedule in repository.schedule_defs:
        assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING, schedule.name
    for sensor in repository.sensor_defs:
        assert sensor.default_status == dg.DefaultSensorStatus.RUNNING, sensor.name


@pytest.mark.parametrize(
    ("today", "expected"),
    [
        (date(2026, 11, 30), date(2026, 10, 1)),
        (date(2026, 12, 1), date(2026, 11, 1)),
        (date(2026, 1, 15), date(2025, 12, 1)),
        (date(2026, 3, 31), date(2026, 2, 1)),
    ],
)
def test_definitions_partitions_start_by_default_on_the_previous_months_first_day(
    today: date, expected: date
) -> None:
    assert load_settings().partitions_start_on(today) == expected
    assert load_settings(partitions_start="2026-06-15").partitions_start_on(today) == date(
        2026, 6, 15
    )


def test_definitions_partitions_start_on_the_machines_first_week_once_noted(
    tmp_path: Path,
) -> None:
    """A machine whose first start made its database begins its partitions on that week's
    Monday (a Saturday start keeps the Friday before); an upgraded one notes nothing; a noted day
    ahead is not taken; the setting still wins."""
    saturday = "2026-03-07T10:00:00+01:00"
    note_first_day(load_settings(home=tmp_path, now=saturday), fresh=False)
    assert not (tmp_path / "first-day").exists()  # an existing machine keeps its start
    note_first_day(load_settings(home=tmp_path, now=saturday), fresh=True)
    settings = load_settings(home=tmp_path)
    assert settings.partitions_start_on(date(2026, 3, 9)) == date(2026, 3, 2)
    note_first_day(load_settings(home=tmp_path, now="2026-05-04T10:00:00+02:00"), fresh=True)
    assert settings.partitions_start_on(date(2026, 3, 9)) == date(2026, 3, 2)  # noted once
    assert settings.partitions_start_on(date(2026, 2, 20)) == date(2026, 1, 1)  # ahead: not taken
    assert load_settings(home=tmp_path, partitions_start="2026-06-15").partitions_start_on() == (
        date(2026, 6, 15)
    )


def test_definitions_partitions_start_in_the_future_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"FOLLOWUP_PARTITIONS_START .* is in the future"):
        load_settings(partitions_start=date.today() + timedelta(days=1))


def test_definitions_evaluate_partitions_are_every_hour_of_business_days_from_a_recent_start() -> (
    None
):
    settings = load_settings(partitions_start="2026-10-01")
    defs = build_definitions(settings)
    assert defs.resolve_schedule_def("evaluate_business_hours").cron_schedule == "0 0-23 * * 1-5"
    partitions = defs.resolve_job_def("evaluate").partitions_def
    assert partitions is not None
    now = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)  # Monday, 13:30 in Berlin
    keys = partitions.get_partition_keys(current_time=now)
    assert keys[0] == "2026-10-01-00:00"  # the first hour of the first day
    week = [k for k in keys if "2026-11-23" <= k < "2026-11-30"]
    assert len(week) == 5 * 24  # Monday to Friday, every hour
    assert {k[-5:] for k in week} == {f"{h:02d}:00" for h in range(24)}
    assert keys[-1] == "2026-11-30-13:00"  # the hour in progress exists
    later = load_settings(
        partitions_start="2026-11-02", evaluate_hours_start=7, evaluate_hours_end=17
    )
    shorter = build_definitions(later).resolve_job_def("evaluate").partitions_def
    assert shorter is not None
    assert shorter.get_partition_keys(current_time=now)[:11] == [
        *(f"2026-11-02-{h:02d}:00" for h in range(7, 17)),
        "2026-11-03-07:00",
    ]


@pytest.mark.parametrize(
    ("tick", "expected"),
    [
        (datetime(2026, 3, 2, 6, 30, tzinfo=UTC), "2026-03-02"),  # Monday, 07:30 Berlin
        (datetime(2026, 4, 6, 5, 30, tzinfo=UTC), None),  # Easter Monday (summer time)
        (datetime(2026, 3, 3, 6, 30, tzinfo=UTC), None),  # a local day off (the holidays table)
        (datetime(2026, 3, 30, 5, 30, tzinfo=UTC), "2026-03-30"),  # Monday after spring DST
        (datetime(2026, 10, 26, 6, 30, tzinfo=UTC), "2026-10-26"),  # Monday after autumn DST
    ],
)
def test_definitions_morning_schedule_ticks_on_business_days_only(
    tick: datetime,
    expected: str | None,
    defs: dg.Definitions,
    db: psycopg.Connection[Any],
    db_url: str,
) -> None:
    db.execute("INSERT INTO holidays (day, kind, name) VALUES ('2026-03-03', 'holiday', 'Offsite')")
    schedule = defs.resolve_schedule_def("morning_report_weekdays")
    assert schedule.cron_schedule == "30 7 * * 1-5"
    result = _tick(defs, schedule, tick, db_url)
    if expected is None:
        assert not result.run_requests
        assert "not a business day" in (result.skip_message or "")
    else:
        assert [r.partition_key for r in result.run_requests or []] == [expected]


@pytest.mark.parametrize(
    ("tick", "runs"),
    [
        (datetime(2026, 3, 2, 12, 30, tzinfo=UTC), True),  # Monday, 13:30 Berlin
        (datetime(2026, 3, 7, 12, 30, tzinfo=UTC), True),  # Saturday
        (datetime(2026, 4, 6, 1, 30, tzinfo=UTC), True),  # Easter Monday, 03:30 Berlin
    ],
)
def test_definitions_enrich_schedule_runs_hourly_every_day(
    tick: datetime, runs: bool, defs: dg.Definitions, db_url: str
) -> None:
    schedule = defs.resolve_schedule_def("enrich_hourly")
    assert schedule.cron_schedule == "30 * * * *"
    result = _tick(defs, schedule, tick, db_url)
    assert bool(result.run_requests) is runs


def test_definitions_every_job_has_a_time_limit(defs: dg.Definitions) -> None:
    jobs = defs.get_repository_def().get_all_jobs()
    assert len(jobs) >= 15
    limits = {job.name: job.tags.get(MAX_RUNTIME_TAG) for job in jobs}
    assert [name for name, limit in limits.items() if limit is None] == []
    assert all(0 < int(str(limit)) <= 3 * 3600 for limit in limits.values()), limits


def test_definitions_evaluate_is_a_queued_singleton_with_a_max_runtime(
    defs: dg.Definitions,
) -> None:
    job = defs.resolve_job_def("evaluate")
    assert job.tags[SINGLETON_TAG] == "evaluate"
    assert int(job.tags["dagster/max_runtime"]) > 0
    assert job.executor_def.name == "in_process"


@pytest.mark.parametrize(
    ("tick", "expected"),
    [
        (datetime(2026, 3, 2, 7, 0, tzinfo=UTC), "2026-03-02-08:00"),  # Monday, 08:00 Berlin
        (datetime(2026, 4, 6, 7, 0, tzinfo=UTC), None),  # Easter Monday
        (datetime(2026, 3, 30, 6, 0, tzinfo=UTC), "2026-03-30-08:00"),  # after the DST switch
        (datetime(2026, 3, 3, 7, 0, tzinfo=UTC), None),  # a local day off (the holidays table)
        (datetime(2026, 5, 1, 6, 0, tzinfo=UTC), "2026-05-01-08:00"),  # Labour Day, worked here
        (datetime(2026, 3, 2, 1, 0, tzinfo=UTC), "2026-03-02-02:00"),  # Monday night, 02:00
        (datetime(2026, 3, 2, 22, 0, tzinfo=UTC), "2026-03-02-23:00"),  # Monday, 23:00
        (datetime(2026, 3, 7, 10, 0, tzinfo=UTC), None),  # Saturday
    ],
)
def test_definitions_evaluate_schedule_skips_holidays(
    tick: datetime,
    expected: str | None,
    defs: dg.Definitions,
    db: psycopg.Connection[Any],
    db_url: str,
) -> None:
    db.execute(
        "INSERT INTO holidays (day, kind, name) VALUES"
        " ('2026-03-03', 'holiday', 'Offsite'), ('2026-05-01', 'workday', 'Trade fair')"
    )
    schedule = defs.resolve_schedule_def("evaluate_business_hours")
    result = _tick(defs, schedule, tick, db_url)
    if expected is None:
        assert not result.run_requests
        assert "not a business day" in (result.skip_message or "")
    else:
        assert result.run_requests is not None
        assert [r.partition_key for r in result.run_requests] == [expected]


@pytest.fixture
def dagster_home(
    tmp_path: Path,
    repo_root: Path,
    database_factory: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """A DAGSTER_HOME with the root dagster.yaml, its storage in a fresh Postgres database."""
    storage = database_factory()
    name = str(conninfo_to_dict(storage)["dbname"])
    monkeypatch.setenv(
        "FOLLOWUP_DAGSTER_PG_URL", with_database(storage, name, driver="postgresql+psycopg2")
    )
    shutil.copyfile(repo_root / "dagster.yaml", tmp_path / "dagster.yaml")
    return tmp_path


def test_definitions_instance_stores_runs_in_postgres(
    defs: dg.Definitions, dagster_home: Path, db_url: str
) -> None:
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert {"key": SINGLETON_TAG, "value": "evaluate", "limit": 1} in limits
        assert instance.run_retries_enabled
        assert instance.run_monitoring_enabled

        job = defs.resolve_job_def("register")
        resources = {
            "postgres": PostgresResource(url=db_url),
            "clock": ClockResource(),
            "espocrm": EspoCrmResource(base_url="http://127.0.0.1:9/espocrm", api_key="unused"),
        }
        result = job.execute_in_process(instance=instance, resources=resources)
        assert result.success
        run = instance.get_run_by_id(result.run_id)
        assert run is not None
        assert run.status == dg.DagsterRunStatus.SUCCESS
        assert run.tags[OUTCOME_TAG] == "ok"
        assert result.output_for_node("register_events") == {}


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        # The Friday before the spring change; the next tick is Monday 07:30 summer time.
        (datetime(2026, 3, 27, 12, 0, tzinfo=UTC), datetime(2026, 3, 30, 5, 30, tzinfo=UTC)),
        # The Friday before the autumn change; the next tick is Monday 07:30 winter time.
        (datetime(2026, 10, 23, 12, 0, tzinfo=UTC), datetime(2026, 10, 26, 6, 30, tzinfo=UTC)),
    ],
)
def test_definitions_morning_schedule_fires_at_local_0730_across_dst(
    after: datetime, expected: datetime, defs: dg.Definitions
) -> None:
    from dagster._utils.schedules import cron_string_iterator

    schedule = defs.resolve_schedule_def("morning_report_weekdays")
    ticks = cron_string_iterator(
        after.timestamp(), str(schedule.cron_schedule), schedule.execution_timezone
    )
    assert next(ticks) == expected
