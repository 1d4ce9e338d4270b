"""evaluate under the real Dagster daemon: one run at a time through the queue, and a backfill
of failed hourly partitions launched through GraphQL as the UI does."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.defs.evaluate import evaluate_partitions
from followup_pipeline.engine.runs import OUTCOME_TAG
from followup_pipeline.first_runs import LAUNCH_RUN  # the mutation `make run` sends
from followup_pipeline.sandbox.environment import env_lines
from followup_pipeline.settings import load_settings
from followup_pipeline.store.db import connection_kwargs
from followup_pipeline_tests.support import free_port, wait_until

from ...conftest import with_database
from .conftest import MONDAY, SANDBOX, Machine

pytestmark = pytest.mark.slow

WORKSPACE = """load_from:
  - python_module:
      module_name: followup_pipeline.definitions
      location_name: followup
"""
LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}
"""
DAEMONS = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy } } } }"
LOCATIONS = """
{ workspaceOrError { ... on Workspace { locationEntries {
    name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } }
} } } }
"""


@dataclass
class Stack:
    """``dagster dev`` (webserver and daemon) on a Postgres instance, pointed at a test database."""

    url: str
    home: Path
    db_url: str

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> Any:
        answer = httpx.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=30
        )
        answer.raise_for_status()
        return answer.json()["data"]

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.home))

    def wait_runs(self, run_ids: list[str], timeout: float = 120) -> list[Any]:
        finished = {
            dg.DagsterRunStatus.SUCCESS,
            dg.DagsterRunStatus.FAILURE,
            dg.DagsterRunStatus.CANCELED,
        }
        with self.instance() as instance:

            def done() -> list[Any] | None:
                records = instance.get_run_records(dg.RunsFilter(run_ids=run_ids))
                if len(records) == len(run_ids) and all(
                    r.dagster_run.status in finished for r in records
                ):
                    return records
                return None

            records: list[Any] = wait_until(done, timeout, f"runs {run_ids}")
            return records


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    database_factory: Callable[..., str],
    template_name: str,
    repo_root: Path,
    sandbox_server: str,
) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("dagster-home")
    shutil.copyfile(
        repo_root / "followup_pipeline" / "instance" / "dagster.yaml", home / "dagster.yaml"
    )
    (home / "workspace.yaml").write_text(WORKSPACE)
    storage = database_factory()
    db_url = database_factory(template_name)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}
    for line in env_lines(SANDBOX, sandbox_server):
        name, _, value = line.partition("=")
        env[name] = value.strip("'")
    env.update(
        DAGSTER_HOME=str(home),
        FOLLOWUP_DATABASE_URL=db_url,
        FOLLOWUP_DAGSTER_PG_URL=with_database(
            storage, str(conninfo_to_dict(storage)["dbname"]), driver="postgresql+psycopg2"
        ),
    )
    os.environ["FOLLOWUP_DAGSTER_PG_URL"] = env["FOLLOWUP_DAGSTER_PG_URL"]
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("dagster")),
            "dev",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-w",
            str(home / "workspace.yaml"),
        ],
        cwd=home,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    running = Stack(url=f"http://127.0.0.1:{port}", home=home, db_url=db_url)
    try:
        wait_until(
            lambda: httpx.get(f"{running.url}/server_info", timeout=2).is_success, 120, "webserver"
        )

        def healthy() -> bool:
            statuses = running.graphql(DAEMONS)["instance"]["daemonHealth"]["allDaemonStatuses"]
            up = {s["daemonType"] for s in statuses if s["healthy"]}
            return {"QUEUED_RUN_COORDINATOR", "BACKFILL"} <= up

        wait_until(healthy, 120, "daemons")

        def loaded() -> bool:
            entries = running.graphql(LOCATIONS)["workspaceOrError"]["locationEntries"]
            [entry] = entries
            error = entry["locationOrLoadError"]
            if error and error["__typename"] == "PythonError":
                raise AssertionError(f"the code location failed to load: {error['message']}")
            return bool(entry["loadStatus"] == "LOADED" and error)

        wait_until(loaded, 120, "the code location")
        yield running
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            # `dagster dev` often waits out its children's own timeouts after a Ctrl-C (a minute,
            # measured): nothing of this stack is needed after the tests, so it is not waited for.
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        os.environ.pop("FOLLOWUP_DAGSTER_PG_URL", None)


@pytest.fixture
def registered(stack: Stack, sandbox: str) -> Iterator[Machine]:
    """Two deals registered back in March, so their steps are long due by the real clock."""
    with httpx.Client(base_url=sandbox, timeout=5) as control:
        control.post("/_sandbox/reset", json={"demo": False}).raise_for_status()
    with psycopg.connect(stack.db_url, autocommit=True, **connection_kwargs()) as db:
        db.execute("TRUNCATE watches, actions, events CASCADE")
        machine = Machine(db_url=stack.db_url, sandbox=sandbox, db=db)
        machine.deal(name="Queue one")
        machine.deal(name="Queue two")
        assert machine.evaluate(MONDAY).success
        yield machine


def _partition_keys(count: int) -> list[str]:
    partitions = evaluate_partitions(load_settings())
    keys = partitions.get_partition_keys(current_time=datetime.now(UTC))
    return keys[-(count + 3) : -3]


def _launch(stack: Stack, partition: str, **tags: str) -> str:
    """Launch an evaluate run for ``partition`` through GraphQL, as the UI's Launchpad does."""
    params = {
        "selector": {
            "repositoryLocationName": "followup",
            "repositoryName": "__repository__",
            "jobName": "evaluate",
        },
        "runConfigData": {},
        "executionMetadata": {
            "tags": [
                {"key": key, "value": value}
                for key, value in {"dagster/partition": partition, **tags}.items()
            ]
        },
    }
    answer = stack.graphql(LAUNCH_RUN, {"params": params})["launchRun"]
    assert answer["__typename"] == "LaunchRunSuccess", answer
    return str(answer["run"]["runId"])


def test_queue_runs_one_evaluate_at_a_time(stack: Stack, registered: Machine) -> None:
    registered.fault(vendor="espocrm", kind="latency", latency_s=3, path="Metadata")
    first, second = (_launch(stack, key) for key in _partition_keys(2))
    records = stack.wait_runs([first, second])
    assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records)
    a, b = sorted(records, key=lambda r: r.start_time)
    assert b.start_time >= a.end_time, "the second evaluate started before the first ended"
    assert {r.dagster_run.tags.get(OUTCOME_TAG) for r in records} == {"ok"}
    tasks = registered.tasks()
    assert len(tasks) == 2  # one per due step of each deal: the latest, step 3
    assert all("Schritt 3 von 3" in t["name"] for t in tasks)


def test_queue_backfill_of_failed_partitions_creates_nothing_twice(
    stack: Stack, registered: Machine
) -> None:
    name = str(conninfo_to_dict(stack.db_url)["dbname"])
    admin = with_database(stack.db_url, "postgres")
    keys = _partition_keys(2)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name))
        )
    try:
        failed = stack.wait_runs(
            [_launch(stack, key, **{"dagster/max_retries": "0"}) for key in keys]
        )
        assert all(r.dagster_run.status == dg.DagsterRunStatus.FAILURE for r in failed)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name))
            )
    params = {
        "selector": {
            "partitionSetName": "evaluate_partition_set",
            "repositorySelector": {
                "repositoryName": "__repository__",
                "repositoryLocationName": "followup",
            },
        },
        "partitionNames": keys,
    }
    launched = stack.graphql(LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill = launched["backfillId"]
    with stack.instance() as instance:

        def backfill_runs() -> list[str] | None:
            runs = instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill}))
            return [r.run_id for r in runs] if len(runs) == 2 else None

        run_ids: list[str] = wait_until(backfill_runs, 120, "backfill runs")
    records = stack.wait_runs(run_ids)
    assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records)
    assert sorted(r.dagster_run.tags["dagster/partition"] for r in records) == sorted(keys)
    tasks = registered.tasks()
    assert len(tasks) == 2  # the backfilled hours found their steps fired: nothing twice
    fired = [a for a in registered.actions() if a["outcome"] == "confirmed"]
    assert sorted(a["provider_ref"] for a in fired) == sorted(t["id"] for t in tasks)
