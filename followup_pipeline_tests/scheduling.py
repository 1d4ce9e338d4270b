"""Dagster's scheduler on the machine's instance, iterated at frozen times: what the daemon does
every minute, after a simulated downtime (``test_missed_ticks.py``, the restart drills).

Dagster has no public API for a scheduler iteration: this module uses its test helpers and the
iteration function the daemon runs (private modules; the package itself imports none).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._scheduler.scheduler import launch_scheduled_runs
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.machine import LOCATION, install_dagster_home
from followup_pipeline.settings import load_settings

from .conftest import with_database

#: Dagster's own code, run in this process here, uses two of its deprecated APIs: its snapshot of
#: a schedule reads ScheduleDefinition.environment_vars, and the schedule function of
#: build_schedule_from_partitioned_job calls JobDefinition.run_request_for_partition.
DEPRECATIONS = [
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


@contextmanager
def machine_scheduler(
    tmp_path: Path, db_url: str, storage: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Scheduler]:
    """The machine's instance (installed from the root dagster.yaml, storage in the Postgres
    database ``storage``) and its schedules in a code location named as the machine's."""
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
