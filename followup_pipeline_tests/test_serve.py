"""``followup serve ROLE``: each role of a production machine on its own, with no more than its
own secrets; the webserver and the daemon find the code server from the settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.machine import LOCATION, install_dagster_home
from followup_pipeline.settings import load_settings

from .conftest import with_database


def _secrets(folder: Path, **values: str) -> Path:
    """A secrets folder: one file a secret, named as its setting."""
    folder.mkdir()
    for name, value in values.items():
        (folder / name).write_text(value, encoding="utf-8")
    return folder


def _serve(role: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "followup_pipeline.cli", "serve", role, "--port", "0"]
    return subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group: the daemon it starts ends with it
    )


def _environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}
    return {**keep, "FOLLOWUP_HOME": str(tmp_path / "home"), **extra}


@pytest.mark.slow  # it starts Dagster's daemon
def test_serve_daemon_needs_only_the_databases_and_the_code_servers_address(
    tmp_path: Path, database_factory: Callable[..., str]
) -> None:
    app = database_factory()
    storage = database_factory()
    dagster_url = with_database(
        storage, str(conninfo_to_dict(storage)["dbname"]), driver="postgresql+psycopg2"
    )
    # What the daemon's systemd unit hands it: the two database URLs, no vendor secret.
    secrets = _secrets(
        tmp_path / "secrets", FOLLOWUP_DATABASE_URL=app, FOLLOWUP_DAGSTER_PG_URL=dagster_url
    )
    env = _environment(
        tmp_path, FOLLOWUP_SECRETS_DIR=str(secrets), FOLLOWUP_CODE_SERVER_HOST="192.0.2.7"
    )
    daemon = _serve("daemon", env, tmp_path)
    try:
        assert daemon.stdout is not None
        first = daemon.stdout.readline()
        # Past every check: it runs Dagster's daemon on the code server's workspace.
        assert first.startswith("followup serve daemon: "), first
        assert "dagster-daemon run -w" in first
    finally:
        # Nothing more is asked of it: the whole group goes at once (a daemon's own stop can
        # take a minute on a loaded machine).
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.communicate(timeout=60)
    workspace = (tmp_path / "home" / "dagster" / "workspace.yaml").read_text(encoding="utf-8")
    assert '"host": "192.0.2.7"' in workspace
    assert app not in workspace


def test_serve_webserver_without_the_code_servers_address_is_refused(tmp_path: Path) -> None:
    done = _serve("webserver", _environment(tmp_path), tmp_path)
    out, _ = done.communicate(timeout=60)
    assert done.returncode == 2
    assert "set FOLLOWUP_CODE_SERVER_HOST" in out


def test_the_production_workspace_loads_the_code_location_from_the_code_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dagster._core.remote_origin import GrpcServerCodeLocationOrigin
    from dagster._core.workspace.load import location_origins_from_yaml_paths

    settings = load_settings(code_server_host="code-server.internal", code_server_port=4300)
    home = install_dagster_home(settings)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    (origin,) = location_origins_from_yaml_paths([str(home / "workspace.yaml")])
    assert isinstance(origin, GrpcServerCodeLocationOrigin)
    assert (origin.host, origin.port, origin.location_name) == (
        "code-server.internal",
        4300,
        LOCATION,
    )
    # Without the setting, the machine's own workspace again (make run's).
    home = install_dagster_home(load_settings())
    assert "python_module" in (home / "workspace.yaml").read_text(encoding="utf-8")
