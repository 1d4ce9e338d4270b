"""The embedded cluster: started when not running, reused, stopped only by who started it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg

from followup_pipeline.store.embedded import EmbeddedCluster


def _migrate_in(home: Path) -> subprocess.CompletedProcess[str]:
    """``followup migrate`` in a process of its own, on the embedded cluster under ``home``."""
    env = {k: v for k, v in os.environ.items() if k != "FOLLOWUP_DATABASE_URL"}
    env["FOLLOWUP_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "followup_pipeline.cli", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_embedded_keeps_its_data_across_restarts(tmp_path: Path) -> None:
    cluster = EmbeddedCluster(tmp_path / "home")
    assert cluster.acquire() is True
    port = cluster.port
    with psycopg.connect(cluster.url("followup"), autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (value text)")
        conn.execute("INSERT INTO kept VALUES ('still here')")
    assert cluster.release() is True
    assert not cluster.is_running()

    again = EmbeddedCluster(tmp_path / "home")
    assert again.acquire() is True
    try:
        assert again.port == port
        with psycopg.connect(again.url("followup")) as conn:
            assert conn.execute("SELECT value FROM kept").fetchone() == ("still here",)
    finally:
        again.release()


def test_embedded_found_running_is_left_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cluster = EmbeddedCluster(home)
    cluster.acquire()
    try:
        done = _migrate_in(home)
        assert done.returncode == 0, done.stderr
        assert "schema at version" in done.stdout
        assert cluster.is_running()
    finally:
        assert cluster.release() is True
    assert not cluster.is_running()


def test_embedded_started_by_a_command_is_stopped_when_it_exits(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = _migrate_in(home)
    assert done.returncode == 0, done.stderr
    assert "applied 0001_schema" in done.stdout
    assert not EmbeddedCluster(home).is_running()
