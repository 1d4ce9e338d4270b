"""``followup dev`` (``make run``): Postgres, migrations, the sandbox, the ingress, ``dagster dev``
and the watchdog (``followup watchdog``).

One embedded Postgres is started once and its URLs are handed to every child process. Vendors
with credentials in the environment are real; with none, the sandbox stands in for all four; with
only some, the start is refused and the missing ones named, so fake deals never reach a real
ClickUp. Ctrl-C stops every child, and Postgres if this process started it.

The console stays quiet: each child writes to its own file under ``FOLLOWUP_HOME/logs/``, and
the console shows the start-up, the URLs once the UI answers, and one line per finished run
(``console.py``), each stamped with the time in the team's zone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO

import httpx

from followup_pipeline.console import FinishedRuns, say
from followup_pipeline.demo_tenants import seed_demo_tenants
from followup_pipeline.domain.localtime import for_people
from followup_pipeline.engine.work import after_migrate
from followup_pipeline.first_runs import (
    launch_first_enrich,
    launch_first_evaluate,
    launch_first_morning_list,
    note_first_day,
)
from followup_pipeline.machine import (
    install_dagster_home,
    machine_environment,
    read_env_file,
    sandbox_env_file,
    vendor_mode,
    workspace_file,
    write_addresses,
)
from followup_pipeline.settings import Settings, secret_environment
from followup_pipeline.store import lead_mode
from followup_pipeline.store.cadences import prepare_cadence
from followup_pipeline.store.db import connect
from followup_pipeline.store.embedded import EmbeddedCluster
from followup_pipeline.store.migrate import migrate

#: Longer than Dagster's own wait for its code server (``local_startup_timeout``, 180 s).
READY_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60
#: How long what a child left in its process group gets to end on SIGTERM before SIGKILL.
LEFTOVER_TIMEOUT_S = 10
SUPERSEDED_DEV = "ignore:Function `dev_command` is superseded:FutureWarning"
#: How often the console asks the UI for finished runs.
RUN_POLL_S = 3.0


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


class StartError(RuntimeError):
    """A child did not come up (it exited, or did not answer in time)."""


def _wait_http(url: str, what: str, process: subprocess.Popen[bytes], log_file: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StartError(f"{what} exited with status {process.returncode}; see {log_file}")
        try:
            if httpx.get(url, timeout=5.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise StartError(
        f"{what} did not answer at {url} within {READY_TIMEOUT_S:.0f} s; see {log_file}"
    )


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Send ``signum`` to the child's process group (it leads one); gone already is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def group_alive(process: subprocess.Popen[bytes]) -> bool:
    """Whether a process of the child's group is still running (the child itself exited)."""
    try:
        os.killpg(process.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def reap_group(process: subprocess.Popen[bytes], timeout: float = LEFTOVER_TIMEOUT_S) -> None:
    """End what the child left behind in its group (e.g. a code server the UI or the daemon
    started, that outlived them): SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if not group_alive(process):
        return
    signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while group_alive(process) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(process):
        signal_group(process, signal.SIGKILL)


class Launcher:
    """Starts the machine's processes and stops them all on Ctrl-C."""

    def __init__(
        self, settings: Settings, *, host: str = "127.0.0.1", port: int = 3000, demo: bool = True
    ) -> None:
        self.settings = settings
        #: On the sandbox: the live demo (a busy CRM, webhooks every 5 s, a first evaluate and
        #: the current window's morning list).
        self.demo = demo
        self.host = host
        self.port = port
        self.children: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.cluster: EmbeddedCluster | None = None
        self.env = dict(os.environ)
        self.logs = settings.home / "logs"
        self._files: list[IO[bytes]] = []
        #: The first evaluate's run id until it ends: then the first summaries are queued, and
        #: once they end (their run id, ``first_enrich``) the demo's morning list.
        self.first_evaluate: str | None = None
        self.first_enrich: str | None = None

    def say(self, message: str) -> None:
        """A console line, stamped in the team's zone."""
        say(message, self.settings.timezone)

    def _spawn(
        self, what: str, argv: list[str], env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen[bytes], Path]:
        self.logs.mkdir(parents=True, exist_ok=True)
        path = self.logs / f"{what}.log"
        output = path.open("ab")
        started = for_people(datetime.now(UTC), self.settings.timezone)
        output.write(f"\n--- {started} followup dev ---\n".encode())
        output.flush()
        self._files.append(output)
        # Each child leads its own process group: a stop reaches its own children too (the
        # webserver, daemon and code server of `dagster dev`), as Ctrl-C in a terminal would.
        process = subprocess.Popen(
            argv,
            env=self.env if env is None else env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.children.append((what, process, path))
        return process, path

    def start_database(self) -> None:
        if self.settings.database_url is None:
            cluster = EmbeddedCluster(self.settings.home)
            self.cluster = cluster
            if cluster.acquire():
                self.say(f"started the embedded Postgres on 127.0.0.1:{cluster.port}")
        install_dagster_home(self.settings)
        self.env = machine_environment(self.settings, self.env, secrets=False)
        url = self.env["FOLLOWUP_DATABASE_URL"]
        applied = migrate(url)
        # A new database (its first migration applied now) is a new machine: its first week.
        note_first_day(self.settings, fresh=any(m.version == 1 for m in applied))
        offsets = prepare_cadence(url, self.settings)
        after_migrate(url, self.settings, [m.version for m in applied])
        self.say(
            f"database ready ({len(applied)} migration(s) applied); cadence "
            f"{self.settings.cadence_name!r}: business days {', '.join(map(str, offsets))}"
        )

    def lead_mode(self, *, sandbox: bool) -> str:
        """Lead intake's mode at the start: the demo writes to the sandbox's CRM, and says so."""
        with connect(self.env["FOLLOWUP_DATABASE_URL"]) as conn, conn.transaction():
            return lead_mode.at_start(conn, self.settings, sandbox=sandbox)

    def start_sandbox(self) -> None:
        env_file = sandbox_env_file(self.settings)
        port = self.settings.sandbox_port
        webhook = f"http://127.0.0.1:{self.settings.ingress_port}/webhooks/espocrm"
        process, path = self._spawn(
            "sandbox",
            [
                _bin("followup"),
                "sandbox",
                "--port",
                str(port),
                "--env-file",
                str(env_file),
                "--webhook-url",
                webhook,
                # The world kept under FOLLOWUP_HOME, so a second start agrees with the machine's
                # watches; in the demo, webhooks every 5 s and a deal changing every 90 s.
                "--state-file",
                str(self.settings.home / "sandbox" / "state.json"),
                *(["--demo"] if self.demo else []),
            ],
        )
        _wait_http(f"http://127.0.0.1:{port}/_sandbox/stats", "the sandbox", process, path)
        self.env.update(read_env_file(env_file))

    def start_ingress(self) -> None:
        """``followup ingress`` on the configured address, waited for through ``/healthz``."""
        host, port = self.settings.ingress_host, self.settings.ingress_port
        process, path = self._spawn(
            "ingress", [_bin("followup"), "ingress", "--host", host, "--port", str(port)]
        )
        _wait_http(f"http://{host}:{port}/healthz", "the ingress", process, path)

    def start_dagster(self) -> None:
        """``dagster dev`` on the machine's workspace, waited for until the UI answers."""
        argv = [_bin("dagster"), "dev", "-h", self.host, "-p", str(self.port)]
        workspace = ["-w", str(workspace_file(self.settings))]
        # Only Dagster's processes need the vendor secrets (its resources read them through
        # dg.EnvVar): those from .env or the secrets folder go into its environment alone.
        env = {**secret_environment(self.settings), **self.env}
        # `dagster dev` warns that `dg dev` supersedes it (a FutureWarning): silenced by its text.
        env["PYTHONWARNINGS"] = ",".join(filter(None, [env.get("PYTHONWARNINGS"), SUPERSEDED_DEV]))
        process, path = self._spawn("dagster", [*argv, *workspace], env=env)
        _wait_http(f"{self.ui}/server_info", "the Dagster UI", process, path)

    def start_watchdog(self) -> None:
        """``followup watchdog``: the daemon, the schedules' ticks and the sensors watched from a
        process of its own, which sends its alerts itself (with the secrets Dagster gets)."""
        env = {**secret_environment(self.settings), **self.env}
        self._spawn("watchdog", [_bin("followup"), "watchdog"], env=env)

    @property
    def ui(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        # A second Ctrl-C or SIGTERM (a terminal's process group, a supervisor repeating itself)
        # must not cut the stop short and leave Postgres or a child running without an owner.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        for _, process, _ in reversed(self.children):
            if process.poll() is None:
                signal_group(process, signal.SIGINT)
        for what, process, _ in reversed(self.children):
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.say(f"{what} did not stop in {STOP_TIMEOUT_S} s; killing it")
                signal_group(process, signal.SIGKILL)
                process.wait()
            reap_group(process)
        for output in self._files:
            output.close()
        if self.cluster is not None and self.cluster.release():
            self.say("stopped the embedded Postgres")

    def watch(self) -> int:
        """Print one line per finished run until a child exits (its status is returned)."""
        with FinishedRuns(self.ui) as runs:
            while True:
                for what, process, path in self.children:
                    if process.poll() is not None:
                        self.say(f"{what} exited with status {process.returncode}; see {path}")
                        return process.returncode or 1
                for line in runs.new():
                    self.say(line)
                if self.first_evaluate is not None and self.first_evaluate in runs.seen:
                    # The first evaluate ended (its tasks are in): now the summaries.
                    self.first_evaluate = None
                    line, self.first_enrich = launch_first_enrich(self.ui)
                    self.say(line)
                    if self.first_enrich is None:
                        self.say(launch_first_morning_list(self.ui, self.settings))
                if self.first_enrich is not None and self.first_enrich in runs.seen:
                    # The summaries are in: the first morning list shows them.
                    self.first_enrich = None
                    self.say(launch_first_morning_list(self.ui, self.settings))
                time.sleep(RUN_POLL_S)

    def run(self) -> int:
        """Start everything, wait until a child exits or Ctrl-C, then stop everything."""
        mode = vendor_mode(self.settings)

        def _interrupt(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt

        # Both stop the machine. Setting SIGINT's handler here also gives the children SIGINT's
        # default back: started from a background shell, this process inherits SIGINT ignored,
        # and so would `dagster dev`, which would then never hear the stop.
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        try:
            self.say(f"starting Followup ({mode} vendors) in {self.settings.home}")
            self.start_database()
            self.say(self.lead_mode(sandbox=mode == "sandbox"))
            if mode == "sandbox":
                self.start_sandbox()
                self.say(seed_demo_tenants(self.env["FOLLOWUP_DATABASE_URL"], self.settings))
            self.start_ingress()
            self.start_dagster()
            self.start_watchdog()
            ingress = f"http://{self.settings.ingress_host}:{self.settings.ingress_port}"
            write_addresses(self.settings, ui=self.ui, ingress=ingress)
            self.say(f"Followup is up: Dagster UI at {self.ui}")
            self.say(f"webhooks: {ingress}/webhooks/espocrm; logs in {self.logs}")
            if mode == "sandbox":
                self.say(f"sandbox vendors at http://127.0.0.1:{self.settings.sandbox_port}")
            if mode == "sandbox" and self.demo:
                # With real vendors, the schedules decide (business days and hours only).
                line, self.first_evaluate = launch_first_evaluate(self.ui)
                self.say(line)
                if self.first_evaluate is None:
                    self.say(launch_first_morning_list(self.ui, self.settings))
            self.say("Ctrl-C stops everything; finished runs are listed below")
            return self.watch()
        except KeyboardInterrupt:
            self.say("stopping")
            return 0
        except StartError as error:
            self.say(f"could not start: {error}")
            return 1
        finally:
            self.stop()
