"""`followup dev` (what `make run` starts): Dagster's UI and daemon on a Postgres instance."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest

from followup_pipeline.machine import vendor_mode
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.settings import ConfigError, load_settings
from followup_pipeline.store.embedded import EmbeddedCluster
from followup_pipeline_tests.support import free_port, wait_until

SANDBOX = SandboxConfig()
DAEMON_QUERY = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy } } } }"
LOCATION_QUERY = """
{ workspaceOrError { ... on Workspace { locationEntries {
    name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } }
} } } }
"""


def test_launcher_refuses_partial_vendor_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("FOLLOWUP_"):
            monkeypatch.delenv(name)
    assert vendor_mode(load_settings()) == "sandbox"
    monkeypatch.setenv("FOLLOWUP_CLICKUP_TOKEN", "pk_real")
    with pytest.raises(ConfigError) as caught:
        vendor_mode(load_settings())
    for missing in (
        "FOLLOWUP_ESPOCRM_API_KEY",
        "FOLLOWUP_GRAPH_CLIENT_SECRET",
        "FOLLOWUP_MISTRAL_API_KEY",
    ):
        assert missing in str(caught.value)


@pytest.mark.slow
def test_launcher_serves_dagster_on_postgres_with_the_daemon(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}
    env.update(
        FOLLOWUP_HOME=str(home),
        FOLLOWUP_SANDBOX_PORT=str(free_port()),
        FOLLOWUP_INGRESS_PORT=str(free_port()),
    )
    console = (tmp_path / "console.txt").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "followup_pipeline.cli", "dev", "--port", str(port)],
        env=env,
        stdout=console,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{base}/server_info", timeout=2).is_success, 120, "the UI")

        def daemons_healthy() -> bool:
            answer = httpx.post(f"{base}/graphql", json={"query": DAEMON_QUERY}, timeout=5).json()
            statuses = answer["data"]["instance"]["daemonHealth"]["allDaemonStatuses"]
            healthy = {s["daemonType"] for s in statuses if s["healthy"]}
            return {"SCHEDULER", "SENSOR", "QUEUED_RUN_COORDINATOR"} <= healthy

        wait_until(daemons_healthy, 120, "daemons_healthy")

        def location_loaded() -> bool:
            answer = httpx.post(f"{base}/graphql", json={"query": LOCATION_QUERY}, timeout=5).json()
            [entry] = answer["data"]["workspaceOrError"]["locationEntries"]
            loaded = entry["locationOrLoadError"]
            assert loaded is None or loaded["__typename"] != "PythonError", loaded
            return bool(entry["loadStatus"] == "LOADED" and loaded)

        wait_until(location_loaded, 120, "location_loaded")
        wait_until(
            lambda: "Followup is up" in (tmp_path / "console.txt").read_text(), 60, "the URLs"
        )
        cluster = EmbeddedCluster(home.resolve())
        with psycopg.connect(cluster.url("dagster")) as conn:
            tables = {row[0] for row in conn.execute("SELECT tablename FROM pg_tables")}
        assert {"runs", "event_logs", "jobs"} <= tables
        assert (home / "dagster" / "dagster.yaml").exists()
    finally:
        os.killpg(process.pid, signal.SIGINT) if process.poll() is None else None
        process.wait(timeout=90)
        console.close()
    assert not EmbeddedCluster(home.resolve()).is_running()
    # A quiet console: start-up, the URLs once the UI answered, the stop; the children's output
    # is in their log files. No secret is echoed, the sandbox's included.
    lines = (tmp_path / "console.txt").read_text().splitlines()
    assert len(lines) < 20, lines
    up = next(i for i, line in enumerate(lines) if "Followup is up: Dagster UI at" in line)
    assert f"http://127.0.0.1:{port}" in lines[up]
    assert all("Traceback" not in line and "Warning" not in line for line in lines), lines
    for secret in (SANDBOX.clickup_token, SANDBOX.espocrm_api_key, SANDBOX.mistral_api_key):
        assert secret.get_secret_value() not in "\n".join(lines)
    logs = home / "logs"
    assert {"sandbox.log", "ingress.log", "dagster.log"} <= {p.name for p in logs.iterdir()}
    assert "Serving dagster-webserver" in (logs / "dagster.log").read_text()
