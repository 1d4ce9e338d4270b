"""One CLI from anywhere in the checkout: the checkout's machine, ``followup dagster …`` with the
machine's environment, and a clear word when there is no machine."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import followup_pipeline
from followup_pipeline.cli import main
from followup_pipeline.defs.evaluate import evaluate_partitions
from followup_pipeline.machine import dagster_argv
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.environment import env_lines
from followup_pipeline.settings import find_checkout, load_settings

from .conftest import with_database


def _clean_environment() -> dict[str, str]:
    """An operator's second shell: nothing of the machine exported."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}


def _followup(*argv: str, cwd: Path, checkout: Path) -> subprocess.CompletedProcess[str]:
    """``followup ARGV`` as run from ``checkout``'s own package."""
    return subprocess.run(
        [sys.executable, "-m", "followup_pipeline.cli", *argv],
        cwd=cwd,
        env={**_clean_environment(), "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_machine_cli_works_from_a_sub_folder_with_nothing_exported(
    tmp_path: Path,
    db_url: str,
    db: psycopg.Connection[Any],
    database_factory: Callable[..., str],
) -> None:
    # A second checkout: its own pyproject.toml and package (linked to this one's code).
    checkout = tmp_path / "checkout"
    deep = checkout / "docs" / "deep"
    deep.mkdir(parents=True)
    (checkout / "pyproject.toml").write_text('[project]\nname = "followup-pipeline"\n')
    (checkout / "followup_pipeline").symlink_to(Path(followup_pipeline.__file__).parent)
    storage = database_factory()
    dagster_url = with_database(
        storage, str(conninfo_to_dict(storage)["dbname"]), driver="postgresql+psycopg2"
    )
    # The checkout's .env names the databases (a real deployment's would; the embedded cluster's
    # URLs come from FOLLOWUP_HOME otherwise): nothing is exported in the shell.
    (checkout / ".env").write_text(
        f"FOLLOWUP_DATABASE_URL={db_url}\nFOLLOWUP_DAGSTER_PG_URL={dagster_url}\n"
    )
    # What `make run` left in the checkout's machine: the sandbox's settings.
    (checkout / ".followup").mkdir()
    lines = env_lines(SandboxConfig(), "http://127.0.0.1:9")
    (checkout / ".followup" / "sandbox.env").write_text("\n".join(lines) + "\n")
    db.execute(
        "INSERT INTO watches (subject_id, subject_name, stage, cadence_name, offsets, time_zone,"
        " base_on, registered_at, registered_by) VALUES ('d-sub', 'Deal from afar', 'Proposal',"
        " 'default', '{5,12,21}', 'Europe/Berlin', '2026-11-02', now(), 'reconcile')"
    )

    listed = _followup("watches", "list", cwd=deep, checkout=checkout)
    assert listed.returncode == 0, listed.stderr
    assert "Deal from afar" in listed.stdout
    assert "1 watch(es)" in listed.stdout

    keys = evaluate_partitions(load_settings()).get_partition_keys()[-3:-1]
    backfill = _followup(
        "dagster", "job", "backfill", "-j", "evaluate", "--partitions", ",".join(keys),
        "--noprompt", cwd=deep, checkout=checkout,
    )  # fmt: skip
    assert backfill.returncode == 0, backfill.stdout + backfill.stderr
    assert "Launched backfill job" in backfill.stdout + backfill.stderr
    with psycopg.connect(with_database(storage, str(conninfo_to_dict(storage)["dbname"]))) as conn:
        rows = conn.execute(
            "SELECT r.pipeline_name, t.value FROM runs r JOIN run_tags t ON t.run_id = r.run_id"
            " WHERE t.key = 'dagster/partition' ORDER BY t.value"
        ).fetchall()
    assert rows == [("evaluate", key) for key in keys]
    # The checkout's machine: its Dagster home under the checkout's .followup.
    assert (checkout / ".followup" / "dagster" / "dagster.yaml").exists()


def test_machine_a_stray_project_file_in_a_parent_folder_supplies_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /tmp is anyone's: a pyproject.toml naming the project there is not this checkout.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "followup-pipeline"\n')
    (tmp_path / ".env").write_text("FOLLOWUP_ESPOCRM_URL=http://attacker.invalid\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    monkeypatch.delenv("FOLLOWUP_HOME")
    assert find_checkout(Path.cwd()) is None
    settings = load_settings()
    assert "attacker" not in str(settings.espocrm_url)
    assert settings.home == tmp_path / "sub" / ".followup"


def test_machine_missing_is_said_clearly_and_nothing_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FOLLOWUP_DATABASE_URL", raising=False)
    home = tmp_path / "nowhere"
    monkeypatch.setenv("FOLLOWUP_HOME", str(home))
    assert main(["watches", "list"]) == 2
    error = capsys.readouterr().err
    assert f"no machine at {home} (FOLLOWUP_HOME)" in error
    assert "make run" in error
    assert not (home / "pgdata").exists()
    assert main(["dagster", "run", "list"]) == 2
    assert "no machine at" in capsys.readouterr().err


def test_machine_dagster_argv_names_the_location_where_a_command_loads_it() -> None:
    home = Path("/m/dagster")
    assert dagster_argv(["job", "backfill", "-j", "evaluate"], home) == [
        "job", "backfill", "-j", "evaluate", "-w", "/m/dagster/workspace.yaml",
    ]  # fmt: skip
    # `job execute` takes no workspace: the module, run from DAGSTER_HOME (never the operator's
    # folder, whose modules would shadow packages).
    assert dagster_argv(["job", "execute", "-j", "evaluate"], home) == [
        "job", "execute", "-j", "evaluate", "-m", "followup_pipeline.definitions",
        "-d", "/m/dagster",
    ]  # fmt: skip
    assert dagster_argv(["run", "list"], home) == ["run", "list"]
    assert dagster_argv(["schedule", "wipe"], home) == ["schedule", "wipe"]
    assert dagster_argv(["job", "list", "-m", "other"], home) == ["job", "list", "-m", "other"]
    assert dagster_argv(["job", "backfill", "--help"], home) == ["job", "backfill", "--help"]
    assert dagster_argv([], home) == []
