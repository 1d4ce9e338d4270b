"""End to end under a real dagster-daemon on Postgres: a signed webhook becomes a watch row."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.sandbox.webhooks import php_json, signatures
from followup_pipeline_tests.support import free_port

from ...conftest import with_database

HOOK = {"id": "6650a1b2c3d4e5f00", "event": "Opportunity.create", "secret": "daemon-secret"}
TIMEOUT_S = 120


def _poll(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"gave up waiting for {what} after {timeout} s")


@pytest.fixture
def machine(
    tmp_path: Path, repo_root: Path, db_url: str, database_factory: Callable[..., str]
) -> Iterator[tuple[str, str]]:
    """The ingress and dagster-daemon as processes on Postgres; (ingress URL, Dagster DB URL)."""
    storage = database_factory()
    dagster_url = with_database(
        storage, str(conninfo_to_dict(storage)["dbname"]), driver="postgresql+psycopg2"
    )
    shutil.copyfile(repo_root / "dagster.yaml", tmp_path / "dagster.yaml")
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_module:\n      module_name: followup_pipeline.definitions\n"
        "      location_name: followup\n"
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(tmp_path),
        FOLLOWUP_HOME=str(tmp_path / "home"),
        FOLLOWUP_DATABASE_URL=db_url,
        FOLLOWUP_DAGSTER_PG_URL=dagster_url,
        FOLLOWUP_ESPOCRM_WEBHOOKS=json.dumps([HOOK]),
        FOLLOWUP_EVENTS_SENSOR_INTERVAL_S="2",
        FOLLOWUP_INGRESS_PORT=str(port),
        FOLLOWUP_ESPOCRM_URL="http://127.0.0.1:9/espocrm",
        FOLLOWUP_ESPOCRM_API_KEY="unused",
        FOLLOWUP_CLICKUP_TOKEN="unused",
        FOLLOWUP_GRAPH_CLIENT_SECRET="unused",
        FOLLOWUP_MISTRAL_API_KEY="unused",
    )
    bin_dir = Path(sys.executable).parent
    processes = [
        subprocess.Popen(
            [str(bin_dir / "followup"), "ingress"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        ),
        subprocess.Popen(
            [str(bin_dir / "dagster-daemon"), "run", "-w", str(workspace)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        ),
    ]
    try:
        yield (
            f"http://127.0.0.1:{port}",
            with_database(storage, str(conninfo_to_dict(storage)["dbname"])),
        )
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.mark.slow
def test_daemon_turns_a_signed_webhook_into_a_watch(
    machine: tuple[str, str], db: psycopg.Connection[Any]
) -> None:
    ingress, dagster_db = machine
    _poll(lambda: httpx.get(f"{ingress}/healthz", timeout=2).status_code == 200, 30, "the ingress")
    body = php_json([{"id": "deal-daemon", "name": "Daemon deal", "stage": "Proposal"}])
    signature, _ = signatures(HOOK["id"], body, HOOK["secret"])
    answer = httpx.post(
        f"{ingress}/webhooks/espocrm", content=body, headers={"Signature": signature}
    )
    assert answer.status_code == 200, answer.text
    watch = _poll(
        lambda: db.execute("SELECT * FROM watches WHERE subject_id = 'deal-daemon'").fetchone(),
        TIMEOUT_S,
        "the watch",
    )
    assert watch["registered_by"] == "webhook"
    assert db.execute("SELECT status FROM events").fetchone() == {"status": "done"}

    def succeeded() -> bool:
        with psycopg.connect(dagster_db) as conn:
            query = "SELECT status FROM runs WHERE pipeline_name = 'register'"
            statuses = {row[0] for row in conn.execute(query).fetchall()}
        return "SUCCESS" in statuses

    _poll(succeeded, 30, "a successful register run")
