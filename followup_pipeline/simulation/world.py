"""The whole machine in one process for a simulation: a database of its own, the sandbox and the
ingress served over HTTP on loopback, the real jobs through Dagster's ``execute_in_process`` with
a set clock, and child processes for the runs that are killed.

The machine's settings come from the environment, as in production: the world puts the sandbox's
``FOLLOWUP_*`` lines into ``os.environ`` while it lives (and puts the environment back after),
so that the resources read their secrets through ``dg.EnvVar`` as they always do.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import psycopg
import uvicorn

from followup_pipeline.clock import SettableClock
from followup_pipeline.defs import build_definitions
from followup_pipeline.ingress.app import create_app as create_ingress
from followup_pipeline.integrations.resources import ClickUpResource
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.sandbox.app import create_app as create_sandbox
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.environment import env_lines
from followup_pipeline.settings import load_settings
from followup_pipeline.store.embedded import EmbeddedCluster
from followup_pipeline.store.migrate import migrate

#: A run's own console lines (Dagster's console logger logs every step at DEBUG, a failure at
#: ERROR) would drown the simulation's table, which counts the failures: none. The run's events
#: are in its instance all the same.
QUIET: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
#: Where the machine's alerts and dead letters are owned: every dead letter has this owner.
OPS_OWNER = "ops-owner@example.com"
OPS_BACKUP = "ops-backup@example.com"


def loopback_socket() -> socket.socket:
    """A socket bound to a free loopback port, held until a ``Server`` serves on it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


class Server:
    """An ASGI app served by uvicorn in a thread of this process, on ``sock`` (by default a free
    loopback port)."""

    def __init__(self, app: Any, sock: socket.socket | None = None) -> None:
        self._sock = sock or loopback_socket()
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="error", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the server at {self.url} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@dataclass
class RunResult:
    """What one run of a job ended as."""

    job: str
    at: datetime
    success: bool
    run_id: str
    partition: str | None = None
    error: str = ""


class World:
    """One simulated machine: see the module's docstring. Use it as a context manager."""

    def __init__(
        self,
        *,
        start: datetime,
        seed: int,
        database_url: str | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.clock = SettableClock(start)
        self.seed = seed
        self._given_url = database_url
        self._extra = dict(settings or {})
        self._stack = contextlib.ExitStack()
        self.cluster: EmbeddedCluster | None = None
        self.db_url = ""
        self.sandbox_url = ""
        self.ingress_url = ""
        self.env: dict[str, str] = {}
        self.sandbox_config = SandboxConfig(seed=seed)

    # -- the parts, started in order ---------------------------------------------------------

    def __enter__(self) -> World:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        # One client for the simulation's own calls: a new one loads the CA bundle each time
        # (a quarter of a simulated day's time, measured).
        self.http = self._stack.enter_context(httpx.Client(timeout=60))
        self.home = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="sim-")))
        #: The output of the last child process (a killed run's).
        self.child_log = self.home / "child.log"
        self._database()
        # The ingress's port first (held, not let go), so that the sandbox knows where its
        # webhooks go.
        ingress_sock = self._stack.enter_context(loopback_socket())
        self.ingress_url = f"http://127.0.0.1:{ingress_sock.getsockname()[1]}"
        self.sandbox_config = SandboxConfig(
            seed=self.seed,
            webhook_url=f"{self.ingress_url}/webhooks/espocrm",
            # The simulation delivers the queue itself (flush) and retries it the next hour.
            webhook_queue_interval_s=86_400.0,
            webhook_retry_interval_s=0.0,
            webhook_max_attempts=6,
            # ClickUp's 429s are injected as faults; its real limit would make the run wait. A
            # 429 says when its window resets, and the client waits that long: 2 s, not 60.
            clickup_rate_limit=1_000_000,
            clickup_rate_window_s=2.0,
            sender_tick_s=0.2,
        )
        sandbox = Server(create_sandbox(self.sandbox_config))
        sandbox.start()
        self._stack.callback(sandbox.stop)
        self.sandbox_url = sandbox.url
        self._environment()
        self.settings = load_settings(env_file=False)
        ingress_app = create_ingress(
            self.settings,
            self.db_url,
            now=lambda: self.clock.now().timestamp(),
            db_timeout_s=2.0,
        )
        ingress = Server(ingress_app, ingress_sock)
        ingress.start()
        self._stack.callback(ingress.stop)
        self.control("POST", "/reset", {"seed": self.seed})
        self.definitions = build_definitions(self.settings)
        self.instance = dg.DagsterInstance.ephemeral()
        self._jobs: dict[str, dg.JobDefinition] = {}
        self._alert_cursor: str | None = None
        #: Wall seconds spent in each job's runs (the cost of a simulated day, by job).
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.sensor_errors: list[str] = []

    def _database(self) -> None:
        if self._given_url:
            self.db_url = self._given_url
        else:
            self.cluster = EmbeddedCluster(self.home / "postgres")
            self.cluster.acquire()
            self._stack.callback(self.cluster.release)
            self.db_url = self.cluster.url("followup")
        migrate(self.db_url)
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM followup.events) + (SELECT count(*) FROM"
                " followup.watches) + (SELECT count(*) FROM followup.tenants)"
            ).fetchone()
        if row is not None and row[0]:
            raise RuntimeError("the simulation needs an empty database: this one has data")

    def _environment(self) -> None:
        values: dict[str, str] = {}
        for line in env_lines(self.sandbox_config, self.sandbox_url):
            [pair] = shlex.split(line)
            name, _, value = pair.partition("=")
            values[name] = value
        values |= {
            "FOLLOWUP_DATABASE_URL": self.db_url,
            # A row left attempted by a killed run is read back by the very next run.
            "FOLLOWUP_ACTION_IN_FLIGHT_S": "0",
            "FOLLOWUP_PARTITIONS_START": "2026-01-01",
            "FOLLOWUP_OPS_OWNER": OPS_OWNER,
            "FOLLOWUP_OPS_BACKUP": OPS_BACKUP,
            # The deals of the last five weeks are adopted at the start (scenario.py).
            "FOLLOWUP_ADOPT_DAYS": "42",
            # The events of a killed run are free again soon (real seconds; a run takes ~1 s).
            "FOLLOWUP_EVENT_LEASE_S": "20",
            # A failed event is tried again at the next run of its job, not minutes later.
            "FOLLOWUP_EVENT_BACKOFF_BASE_S": "0",
            # The world is an installation that went live: each lead is one CRM Lead.
            "FOLLOWUP_LEAD_INTAKE_MODE": "live",
        }
        values |= self._extra
        saved = {name: os.environ.get(name) for name in values}
        saved |= {n: v for n, v in os.environ.items() if n.startswith("FOLLOWUP_")}
        for name in [n for n in os.environ if n.startswith("FOLLOWUP_")]:
            del os.environ[name]
        os.environ.update(values)
        self.env = values

        def restore() -> None:
            for name in [n for n in os.environ if n.startswith("FOLLOWUP_")]:
                del os.environ[name]
            os.environ.update({n: v for n, v in saved.items() if v is not None})

        self._stack.callback(restore)

    # -- the vendors' side -------------------------------------------------------------------

    def control(self, method: str, path: str, body: Any = None) -> Any:
        """The sandbox's control API (``/_sandbox``)."""
        answer = self.http.request(method, f"{self.sandbox_url}/_sandbox{path}", json=body)
        answer.raise_for_status()
        return answer.json()

    def set_time(self, instant: datetime) -> None:
        """The simulation's time, the machine's and the vendors' alike."""
        self.clock.set(instant)
        self.control("POST", "/clock", {"now": instant.isoformat()})

    # -- the machine's runs ------------------------------------------------------------------

    def job(self, name: str) -> dg.JobDefinition:
        if name not in self._jobs:
            self._jobs[name] = self.definitions.resolve_job_def(name)
        return self._jobs[name]

    def run(
        self,
        name: str,
        *,
        partition: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """One run of the job ``name`` in this process, its clock at the simulation's now."""
        now = self.clock.now()
        clock = ClockResource(start=now.isoformat(), ticking=False)
        began = time.monotonic()
        try:
            return self._run(name, now, clock, partition, config)
        finally:
            self.seconds[name] += time.monotonic() - began

    def _run(
        self,
        name: str,
        now: datetime,
        clock: ClockResource,
        partition: str | None,
        config: Mapping[str, Any] | None,
    ) -> RunResult:
        try:
            result = self.job(name).execute_in_process(
                instance=self.instance,
                resources={"clock": clock},
                partition_key=partition,
                # A sensor's request names every section, "loggers" empty among them.
                run_config={**(config or {}), "loggers": QUIET["loggers"]},
                raise_on_error=False,
            )
        except Exception as exc:  # a run that cannot even start (e.g. the database is gone)
            return RunResult(name, now, False, "", partition, f"{type(exc).__name__}: {exc}")
        error = ""
        if not result.success:
            self._sense_failure(result, now)
            failures = [
                e.event_specific_data.error.message  # type: ignore[union-attr]
                for e in result.all_events
                if e.is_step_failure and e.event_specific_data is not None
            ]
            error = (failures or ["failed"])[0].strip().splitlines()[0][:300]
        return RunResult(name, now, result.success, result.run_id, partition, error)

    def _resources(self, now: datetime) -> dict[str, Any]:
        """The resources a sensor takes, concrete (a sensor's context resolves no ``EnvVar``)."""
        return {
            "postgres": PostgresResource(url=self.db_url),
            "clock": ClockResource(start=now.isoformat(), ticking=False),
            "ops_clickup": ClickUpResource(
                base_url=f"{self.sandbox_url}/clickup/api",
                token=self.sandbox_config.clickup_token.get_secret_value(),
                list_id=self.sandbox_config.clickup_ops_list_id,
            ),
        }

    def _sense_failure(self, result: dg.ExecuteInProcessResult, now: datetime) -> None:
        """The ``alerts`` run-failure sensor on a failed run, as the daemon evaluates it."""
        sensor = self.definitions.resolve_sensor_def("alerts")
        resources = self._resources(now)
        try:
            with dg.build_run_status_sensor_context(
                sensor_name="alerts",
                dagster_instance=self.instance,
                dagster_run=result.dagster_run,
                dagster_event=result.get_run_failure_event(),
                resources=resources,
            ) as context:
                sensor(context.for_run_failure())
        except Exception as exc:  # the database may be down: the checks catch up
            self.sensor_errors.append(f"alerts: {type(exc).__name__}: {exc}"[:300])

    def alert_tick(self) -> list[RunResult]:
        """One tick of ``alert_checks`` (its cursor kept as the daemon keeps it) and the
        ``alert`` runs it asks for."""
        now = self.clock.now()
        sensor = self.definitions.resolve_sensor_def("alert_checks")
        resources = self._resources(now)
        try:
            with dg.build_sensor_context(
                instance=self.instance,
                cursor=self._alert_cursor,
                resources={k: resources[k] for k in ("postgres", "clock")},
            ) as context:
                result = sensor(context)
        except Exception as exc:  # the database may be down: the next tick
            self.sensor_errors.append(f"alert_checks: {type(exc).__name__}: {exc}"[:300])
            return []
        assert isinstance(result, dg.SensorResult)
        self._alert_cursor = result.cursor
        return [
            self.run("alert", config=request.run_config) for request in result.run_requests or []
        ]

    def spawn(self, name: str, *, partition: str | None = None) -> subprocess.Popen[str]:
        """The job ``name`` in a child process of its own (``child.py``), so that it can be
        killed for real; its clock at the simulation's now; its output in ``child_log``."""
        args = {"job": name, "now": self.clock.now().isoformat(), "partition": partition}
        with self.child_log.open("w") as output:
            return subprocess.Popen(
                [sys.executable, "-m", "followup_pipeline.simulation.child", json.dumps(args)],
                env={**os.environ},
                stdout=subprocess.DEVNULL,
                stderr=output,
                text=True,
                start_new_session=True,
            )

    @staticmethod
    def kill(process: subprocess.Popen[str]) -> None:
        """SIGKILL: no handler runs, nothing is committed after this instant."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=30)

    # -- the database going away -------------------------------------------------------------

    def database_down(self) -> bool:
        """Stop Postgres as a crash does (``immediate``: no checkpoint, recovery at the next
        start). Only a cluster of the simulation's own can be stopped: False otherwise."""
        if self.cluster is None:
            return False
        self.cluster.crash()
        return True

    def database_up(self) -> None:
        if self.cluster is not None:
            self.cluster.acquire()
