"""The instance Dagster runs with is the root ``dagster.yaml``, its code location the root
``workspace.yaml``: the package ships both byte for byte, the machine installs them into
``DAGSTER_HOME``, and Dagster reads there what the root files say."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.defs.register import CONCURRENCY_TAG, REGISTER_RUNS, register
from followup_pipeline.engine.runs import SINGLETON_TAG
from followup_pipeline.machine import INSTANCE_FILES, LOCATION, MODULE, install_dagster_home
from followup_pipeline.settings import load_settings

from .conftest import with_database

#: Every key of the root dagster.yaml, each checked below: a new one must be checked too.
CHECKED = {
    "storage",
    "run_coordinator",
    "concurrency",
    "scheduler",
    "sensors",
    "run_retries",
    "run_monitoring",
    "code_servers",
    "telemetry",
    "retention",
}


def _root(repo_root: Path, name: str) -> Any:
    return yaml.safe_load((repo_root / name).read_text(encoding="utf-8"))


def _within(declared: Mapping[str, Any], read: Mapping[str, Any]) -> dict[str, Any]:
    """What ``declared`` sets that ``read`` (Dagster's settings, defaults filled in) has not."""
    return {key: value for key, value in declared.items() if read.get(key) != value}


@pytest.mark.parametrize("name", INSTANCE_FILES)
def test_instance_the_package_ships_the_root_file_byte_for_byte(name: str, repo_root: Path) -> None:
    packaged = (resources.files("followup_pipeline") / "instance" / name).read_bytes()
    assert packaged == (repo_root / name).read_bytes(), (
        f"followup_pipeline/instance/{name} differs from the root {name}, the source: "
        f"copy it there (cp {name} followup_pipeline/instance/{name})"
    )
    package_data = tomllib.loads((repo_root / "pyproject.toml").read_text(encoding="utf-8"))
    assert (
        "instance/*.yaml" in package_data["tool"]["setuptools"]["package-data"]["followup_pipeline"]
    )


def test_instance_dagster_home_holds_the_root_files(repo_root: Path) -> None:
    home = install_dagster_home(load_settings())
    for name in INSTANCE_FILES:
        assert (home / name).read_bytes() == (repo_root / name).read_bytes(), name


@pytest.fixture
def instance(
    database_factory: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[dg.DagsterInstance]:
    """The instance as the daemon and the webserver load it: from the ``DAGSTER_HOME`` that the
    machine installs, its storage in a fresh Postgres database."""
    storage = database_factory()
    name = str(conninfo_to_dict(storage)["dbname"])
    monkeypatch.setenv(
        "FOLLOWUP_DAGSTER_PG_URL", with_database(storage, name, driver="postgresql+psycopg2")
    )
    monkeypatch.setenv("DAGSTER_HOME", str(install_dagster_home(load_settings())))
    with dg.DagsterInstance.get() as loaded:
        yield loaded


def test_instance_dagster_runs_with_is_the_root_dagster_yaml(
    instance: dg.DagsterInstance, repo_root: Path
) -> None:
    root = _root(repo_root, "dagster.yaml")
    assert set(root) == CHECKED

    # Storage: runs, event logs, schedules and sensors in Postgres at the URL the env names.
    url_variable = root["storage"]["postgres"]["postgres_url"]["env"]
    url = load_settings().dagster_pg_url
    assert url is not None
    assert url_variable == "FOLLOWUP_DAGSTER_PG_URL"
    for storage in (instance.run_storage, instance.event_log_storage, instance.schedule_storage):
        assert type(storage).__module__.startswith("dagster_postgres"), storage
        assert storage.postgres_url == url.get_secret_value()  # type: ignore[attr-defined]

    # The queue, as configured, and the scheduler with its catch-up settings.
    for key, component in (
        ("run_coordinator", instance.run_coordinator),
        ("scheduler", instance.scheduler),
    ):
        declared = root[key]
        assert type(component).__name__ == declared["class"], key
        assert component.inst_data.module_name == declared["module"], key  # type: ignore[union-attr]
        assert component.inst_data.config_dict == declared.get("config", {}), key  # type: ignore[union-attr]
    coordinator = instance.run_coordinator
    assert isinstance(coordinator, dg.QueuedRunCoordinator)
    config = root["run_coordinator"]["config"]
    assert coordinator.dequeue_interval_seconds == config["dequeue_interval_seconds"]
    assert coordinator.dequeue_use_threads is config["dequeue_use_threads"]
    assert coordinator.dequeue_num_workers == config["dequeue_num_workers"]
    scheduler = instance.scheduler
    assert scheduler is not None
    assert scheduler.max_catchup_runs == root["scheduler"]["config"]["max_catchup_runs"]  # type: ignore[attr-defined]
    assert scheduler.max_tick_retries == root["scheduler"]["config"]["max_tick_retries"]  # type: ignore[attr-defined]

    # Run concurrency: the limits the queue enforces.
    queue = instance.get_concurrency_config().run_queue_config
    assert queue is not None
    runs = root["concurrency"]["runs"]
    assert queue.max_concurrent_runs == runs["max_concurrent_runs"]
    assert [dict(limit) for limit in queue.tag_concurrency_limits] == runs["tag_concurrency_limits"]

    # Sensors, retries, monitoring, code servers, telemetry: as declared, nothing overridden.
    for key in ("concurrency", "sensors", "run_retries", "run_monitoring", "code_servers"):
        assert _within(root[key], instance.get_settings(key)) == {}, key
    assert instance.get_sensor_settings()["use_threads"] is root["sensors"]["use_threads"]
    assert instance.get_sensor_settings()["num_workers"] == root["sensors"]["num_workers"]
    assert instance.run_retries_enabled is root["run_retries"]["enabled"]
    assert instance.run_retries_max_retries == root["run_retries"]["max_retries"]
    monitoring = root["run_monitoring"]
    assert instance.run_monitoring_enabled is monitoring["enabled"]
    assert instance.run_monitoring_start_timeout_seconds == monitoring["start_timeout_seconds"]
    assert instance.run_monitoring_poll_interval_seconds == monitoring["poll_interval_seconds"]
    timeout = root["code_servers"]["local_startup_timeout"]
    assert instance.code_server_process_startup_timeout == timeout
    assert instance.telemetry_enabled is root["telemetry"]["enabled"]
    # Ticks kept: skipped sensor ticks as declared, every other status as Dagster keeps it.
    from dagster._core.definitions.run_request import InstigatorType
    from dagster._core.scheduler.instigation import TickStatus

    kept = instance.get_tick_retention_settings(InstigatorType.SENSOR)
    skipped = root["retention"]["sensor"]["purge_after_days"]["skipped"]
    assert kept[TickStatus.SKIPPED] == skipped
    assert kept[TickStatus.SUCCESS] != skipped


def test_instance_limits_register_runs_to_what_its_sensor_launches(repo_root: Path) -> None:
    runs = _root(repo_root, "dagster.yaml")["concurrency"]["runs"]
    limits = runs["tag_concurrency_limits"]
    tag = (CONCURRENCY_TAG, register.tags[CONCURRENCY_TAG])
    assert [limit["limit"] for limit in limits if (limit["key"], limit["value"]) == tag] == [
        REGISTER_RUNS
    ]
    # Beside the most register runs, the singletons still fit: none waits for a register run.
    singletons = [limit for limit in limits if limit["key"] == SINGLETON_TAG]
    assert runs["max_concurrent_runs"] - REGISTER_RUNS >= len(singletons)


def test_instance_workspace_names_the_machines_code_location(
    repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster._core.workspace.load import location_origins_from_yaml_paths

    home = install_dagster_home(load_settings())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    (origin,) = location_origins_from_yaml_paths([str(home / "workspace.yaml")])
    assert origin.location_name == LOCATION
    target = origin.loadable_target_origin  # type: ignore[attr-defined]
    assert (target.module_name, target.working_directory) == (MODULE, str(home))
    # A bare `dagster dev` in the checkout reads pyproject.toml's [tool.dagster]: the same.
    project = tomllib.loads((repo_root / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["tool"]["dagster"] == {"module_name": MODULE, "code_location_name": LOCATION}
    (declared,) = _root(repo_root, "workspace.yaml")["load_from"]
    assert declared["python_module"]["module_name"] == MODULE
    assert declared["python_module"]["location_name"] == LOCATION
