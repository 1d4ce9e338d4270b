"""A run's presence in Postgres (``PostgresResource``) and the ``dead_runs`` sensor that fails a
started run whose presence is gone (``engine/reaper.py``), on a real Postgres."""

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import psycopg
import pytest

from followup_pipeline.defs import alerts, housekeeping
from followup_pipeline.engine import reaper
from followup_pipeline.engine.reaper import dead_runs_tick
from followup_pipeline.integrations.resources import ClickUpResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import load_settings
from followup_pipeline.store.presence import (
    START_GRACE_S,
    TAG,
    TAG_EXPECTED,
    TAG_NONE,
    TAG_VALUE,
    Presences,
    application_name,
    open_presence,
)

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
AFTER_S = 60.0
LEASE_S = 900.0
#: A URL where no Postgres answers: connecting is refused at once.
NOWHERE = "postgresql://nobody@127.0.0.1:1/none"


def _sessions(db: psycopg.Connection[Any], run_id: str) -> list[str]:
    rows = db.execute(
        "SELECT application_name FROM pg_stat_activity WHERE application_name = %s",
        (application_name(run_id),),
    ).fetchall()
    return [row["application_name"] for row in rows]


def _gone(db: psycopg.Connection[Any], run_id: str) -> bool:
    """Whether the run's presence has left ``pg_stat_activity`` (a closed session's backend
    exits a moment after its client closed it)."""
    deadline = time.monotonic() + 5
    while _sessions(db, run_id) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _sessions(db, run_id)


@dg.op
def look_around(context: dg.OpExecutionContext, postgres: PostgresResource) -> dict[str, Any]:
    """What the run sees of itself while it executes: its presence and its tag."""
    with postgres.connection() as conn:
        rows = conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE application_name = %s",
            (application_name(context.run_id),),
        ).fetchall()
    run = context.instance.get_run_by_id(context.run_id)
    assert run is not None
    return {"sessions": [row["application_name"] for row in rows], "tag": run.tags.get(TAG)}


@dg.job(executor_def=dg.in_process_executor)
def present() -> None:
    look_around()


@dg.op
def no_database(postgres: PostgresResource) -> str:
    """Work that needs no database: its pool is never opened."""
    return "done"


@dg.job(executor_def=dg.in_process_executor)
def without_database() -> None:
    no_database()


def test_a_run_holds_its_presence_while_it_executes_and_is_tagged(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    with dg.instance_for_test() as instance:
        result = present.execute_in_process(
            instance=instance, resources={"postgres": PostgresResource(url=db_url)}
        )
        assert result.success
        seen = result.output_for_node("look_around")
        run = instance.get_run_by_id(result.run_id)
    assert seen == {"sessions": [f"followup-run:{result.run_id}"], "tag": "postgres"}
    assert run is not None
    assert run.tags[TAG] == TAG_VALUE
    assert _gone(db, result.run_id)


def test_a_presence_keeps_server_side_keepalives(db_url: str, db: psycopg.Connection[Any]) -> None:
    run_id = str(uuid.uuid4())
    presence = open_presence(db_url, run_id)
    try:
        row = presence.execute(
            "SELECT current_setting('tcp_keepalives_idle') AS idle,"
            " current_setting('tcp_keepalives_interval') AS every,"
            " current_setting('tcp_keepalives_count') AS count,"
            " inet_client_addr() IS NOT NULL AS tcp"
        ).fetchone()
        assert _sessions(db, run_id) == [application_name(run_id)]
    finally:
        presence.close()
    assert row is not None
    if row["tcp"]:  # on a Unix socket the server ignores them, and shows 0
        assert (row["idle"], row["every"], row["count"]) == ("30", "10", "3")


def test_a_presence_that_cannot_be_opened_does_not_stop_the_run() -> None:
    with dg.instance_for_test() as instance:
        result = without_database.execute_in_process(
            instance=instance,
            resources={"postgres": PostgresResource(url=NOWHERE)},
            tags={TAG: TAG_VALUE},  # as a retry inherits it from the run it retries
        )
        assert result.success
        run = instance.get_run_by_id(result.run_id)
        said = [record.user_message for record in instance.all_logs(result.run_id)]
    assert run is not None
    assert run.tags[TAG] == TAG_NONE  # never judged by its presence
    assert any("no presence in Postgres for this run" in message for message in said)


def test_no_presence_outside_a_run(db_url: str, db: psycopg.Connection[Any]) -> None:
    # A sensor's resources have no run: they open nothing.
    with dg.build_resources({"postgres": PostgresResource(url=db_url)}) as built:
        assert built.postgres._presence is None


def _add_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> str:
    """A started ``register`` run with ``tags``, as the daemon would have stored it."""
    run = dg.DagsterRun(
        job_name="register",
        run_id=str(uuid.uuid4()),
        status=dg.DagsterRunStatus.STARTED,
        tags=tags,
    )
    return instance.add_run(run).run_id


class Ticks:
    """Ticks of the reaper at set instants, its cursor carried from tick to tick as the daemon
    does."""

    def __init__(self, instance: dg.DagsterInstance, db_url: str) -> None:
        self.instance = instance
        self.db = PostgresResource(url=db_url)
        self.cursor: str | None = None

    def __call__(self, now: datetime) -> str:
        with dg.build_sensor_context(instance=self.instance, cursor=self.cursor) as context:
            result = dead_runs_tick(context, self.db, now=now, after_s=AFTER_S, lease_s=LEASE_S)
        self.cursor = result.cursor
        assert not result.run_requests
        assert result.skip_reason is not None
        return str(result.skip_reason.skip_message)

    def watched(self) -> dict[str, str]:
        return dict(json.loads(self.cursor or "{}")["absent"])

    def status(self, run_id: str) -> dg.DagsterRunStatus:
        run = self.instance.get_run_by_id(run_id)
        assert run is not None
        return run.status


@pytest.fixture
def presences(db_url: str) -> Iterator[dict[str, psycopg.Connection[Any]]]:
    """Presences the test opens by run id (as a run's resource would), closed after it."""
    opened: dict[str, psycopg.Connection[Any]] = {}
    yield opened
    for conn in opened.values():
        conn.close()


def test_reaper_fails_only_a_tagged_run_absent_on_two_ticks_and_for_long_enough(
    db_url: str,
    db: psycopg.Connection[Any],
    presences: dict[str, psycopg.Connection[Any]],
) -> None:
    with dg.instance_for_test() as instance:
        tagged = {TAG: TAG_VALUE}
        alive = _add_run(instance, tagged)
        dead = _add_run(instance, tagged)
        untagged = _add_run(instance, {})
        back = _add_run(instance, tagged)  # absent a while, then present again
        presences[alive] = open_presence(db_url, alive)
        tick = Ticks(instance, db_url)

        assert tick(T0) == "0 run(s) failed, 2 absent run(s) watched"
        assert sorted(tick.watched()) == sorted([dead, back])
        # Absent on two ticks, but not for AFTER_S yet.
        assert tick(T0 + timedelta(seconds=30)) == "0 run(s) failed, 2 absent run(s) watched"
        assert tick.watched()[dead] == T0.isoformat()
        presences[back] = open_presence(db_url, back)
        assert tick(T0 + timedelta(seconds=61)) == "1 run(s) failed, 0 absent run(s) watched"

        assert tick.status(dead) == dg.DagsterRunStatus.FAILURE
        dead_run = instance.get_run_by_id(dead)
        assert dead_run is not None
        assert dead_run.tags["followup/failed_by"] == "dead_runs"
        for run_id in (alive, untagged, back):
            assert tick.status(run_id) == dg.DagsterRunStatus.STARTED
        [failure] = instance.all_logs(dead, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert failure.dagster_event is not None
        message = str(failure.dagster_event.message)
        assert message.startswith("its process is gone: no database session since 2026-03-02")
        assert "FOLLOWUP_EVENT_LEASE_S (900 s)" in message

        # The run seen present again was forgotten: gone now, it is watched from scratch.
        presences.pop(back).close()
        assert _gone(db, back)
        assert tick(T0 + timedelta(seconds=90)) == "0 run(s) failed, 1 absent run(s) watched"
        assert tick.watched() == {back: (T0 + timedelta(seconds=90)).isoformat()}
        assert tick.status(back) == dg.DagsterRunStatus.STARTED


def test_reaper_starts_anew_after_a_stale_cursor_and_reads_a_bad_one_as_none(
    db_url: str,
) -> None:
    with dg.instance_for_test() as instance:
        dead = _add_run(instance, {TAG: TAG_VALUE})
        tick = Ticks(instance, db_url)
        tick(T0)
        # The sensor was stopped for ten minutes: the run may have been present meanwhile.
        assert tick(T0 + timedelta(minutes=10)) == "0 run(s) failed, 1 absent run(s) watched"
        assert tick.watched() == {dead: (T0 + timedelta(minutes=10)).isoformat()}
        tick.cursor = "not json"
        assert tick(T0 + timedelta(minutes=11)) == "0 run(s) failed, 1 absent run(s) watched"
        assert tick(T0 + timedelta(minutes=12)).startswith("1 run(s) failed")
        assert tick.status(dead) == dg.DagsterRunStatus.FAILURE


def test_reaper_leaves_runs_that_started_before_the_database_server(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A restart of Postgres ends every presence, whether or not its run lives on.
    restarted = Presences(run_ids=frozenset(), server_started=datetime.now(UTC) + timedelta(1))
    monkeypatch.setattr(reaper, "live_presences", lambda conn: restarted)
    with dg.instance_for_test() as instance:
        run_id = _add_run(instance, {TAG: TAG_VALUE})
        tick = Ticks(instance, db_url)
        tick(T0)
        said = tick(T0 + timedelta(minutes=2))
        assert tick.status(run_id) == dg.DagsterRunStatus.STARTED
    assert said == (
        "0 run(s) failed, 0 absent run(s) watched, 1 started before the database server "
        "(left to run monitoring)"
    )


def test_a_reaped_run_is_retried_and_alerted(db_url: str, db: psycopg.Connection[Any]) -> None:
    settings = load_settings()
    retries = {"run_retries": {"enabled": True, "max_retries": 1}}
    with dg.instance_for_test(overrides=retries) as instance:
        dead = _add_run(instance, {TAG: TAG_VALUE})
        # The real sensor, as the housekeeping capability registers it (real time).
        [sensor] = housekeeping.build_defs(settings).sensors or []
        assert sensor.name == "dead_runs"
        assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
        assert sensor.minimum_interval_seconds == 30
        with dg.build_sensor_context(
            instance=instance, resources={"postgres": PostgresResource(url=db_url)}
        ) as context:
            first = sensor.evaluate_tick(context)
        assert first.skip_message == "0 run(s) failed, 1 absent run(s) watched"
        # Seen absent long enough ago: the next tick fails it.
        long_ago = (datetime.now(UTC) - timedelta(seconds=settings.dead_run_after_s)).isoformat()
        cursor = json.dumps({"tick": long_ago, "absent": {dead: long_ago}})
        tick = Ticks(instance, db_url)
        tick.cursor = cursor
        assert tick(datetime.now(UTC)).startswith("1 run(s) failed")

        run = instance.get_run_by_id(dead)
        assert run is not None
        assert run.status == dg.DagsterRunStatus.FAILURE
        # What the run-retry daemon reads: Dagster decided at the failure to retry it.
        assert run.tags["dagster/will_retry"] == "true"
        # The alerts run-failure sensor records it like any failed run.
        [failure] = instance.all_logs(dead, of_type=dg.DagsterEventType.RUN_FAILURE)
        [alerts_sensor] = [
            s for s in alerts.build_defs(settings).sensors or [] if s.name == "alerts"
        ]
        ops = ClickUpResource(base_url="http://127.0.0.1:1", token="unused", list_id="unset")
        with dg.build_run_status_sensor_context(
            sensor_name="alerts",
            dagster_instance=instance,
            dagster_run=run,
            dagster_event=failure.get_dagster_event(),
            resources={
                "postgres": PostgresResource(url=db_url),
                "clock": ClockResource(),
                "ops_clickup": ops,
            },
        ) as context:
            alerts_sensor(context.for_run_failure())
    [alert] = db.execute("SELECT kind, subject, message, run_id FROM alerts").fetchall()
    assert (alert["kind"], alert["subject"], alert["run_id"]) == ("run_failure", "register", dead)
    assert alert["message"].startswith("RunFailure: its process is gone")


def test_reaper_fails_a_run_killed_before_its_first_step_opened_its_presence(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    # A code server killed between a run's start and its resources: the run never tagged itself
    # `postgres`, but its job said from the launch that it would (`expected`).
    with dg.instance_for_test() as instance:
        starting = _add_run(instance, {TAG: TAG_EXPECTED})
        tick = Ticks(instance, db_url)
        now = datetime.now(UTC)
        assert tick(now) == "0 run(s) failed, 0 absent run(s) watched"  # still starting
        later = now + timedelta(seconds=START_GRACE_S + 1)
        assert tick(later) == "0 run(s) failed, 1 absent run(s) watched"
        assert (
            tick(later + timedelta(seconds=AFTER_S)) == "1 run(s) failed, 0 absent run(s) watched"
        )
        assert tick.status(starting) == dg.DagsterRunStatus.FAILURE


def test_every_job_that_holds_a_presence_says_so_from_its_launch() -> None:
    from followup_pipeline.defs import build_definitions

    repository = build_definitions(load_settings()).get_repository_def()
    said = {}
    for job in repository.get_all_jobs():
        holds = all(
            "postgres" in node.definition.required_resource_keys for node in job.graph.nodes
        )
        said[job.name] = (holds, job.tags.get(TAG) == TAG_EXPECTED)
    assert all(holds == tagged for holds, tagged in said.values()), said
    assert said["housekeeping_backup"] == (False, False)
    assert said["register"] == (True, True)
