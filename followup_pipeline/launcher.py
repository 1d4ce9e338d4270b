"""``followup dev`` (``make run``): Postgres, migrations, the sandbox, the ingress, ``dagster dev``.

One embedded Postgres is started once and its URLs are handed to every child process. Vendors
with credentials in the environment are real; with none, the sandbox stands in for all four; with
only some, the start is refused and the missing ones named, so fake deals never reach a real
ClickUp. Ctrl-C stops every child, and Postgres if this process started it.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import httpx

from followup_pipeline.commands.core import prepare_cadence
from followup_pipeline.settings import ConfigError, Settings, secret_environment
from followup_pipeline.store.embedded import EmbeddedCluster
from followup_pipeline.store.migrate import migrate

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = REPO_ROOT / "dagster.yaml"
WORKSPACE = REPO_ROOT / "workspace.yaml"
READY_TIMEOUT_S = 60.0


def install_dagster_home(home: Path) -> Path:
    """Create ``home/dagster`` and copy the instance template into it."""
    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(TEMPLATE, dagster_home / "dagster.yaml")
    return dagster_home


def vendor_mode(settings: Settings) -> str:
    """'sandbox' when no vendor credential is set, 'real' when all are; else refuse."""
    missing = settings.sandbox_credentials_missing()
    if len(missing) == 4:
        return "sandbox"
    if missing:
        raise ConfigError(
            "some vendor credentials are set and others are not; set all or none "
            f"(none starts the sandbox). Missing: {', '.join(missing)}"
        )
    return "real"


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _wait_http(url: str, what: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise RuntimeError(f"{what} did not answer at {url} within {READY_TIMEOUT_S:.0f} s")


def _read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        for word in shlex.split(line, comments=True):
            name, sep, value = word.partition("=")
            if sep and name.startswith("FOLLOWUP_"):
                values[name] = value
    return values


class Launcher:
    """Starts the machine's processes and stops them all on Ctrl-C."""

    def __init__(self, settings: Settings, *, host: str = "127.0.0.1", port: int = 3000) -> None:
        self.settings = settings
        self.host = host
        self.port = port
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.cluster: EmbeddedCluster | None = None
        self.env = dict(os.environ)

    def _spawn(
        self, what: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(argv, env=self.env if env is None else env)
        self.children.append((what, process))
        return process

    def start_database(self) -> None:
        if self.settings.database_url is not None:
            url = self.settings.database_url.get_secret_value()
            self.env["FOLLOWUP_DATABASE_URL"] = url
            if self.settings.dagster_pg_url is None:
                raise ConfigError(
                    "FOLLOWUP_DAGSTER_PG_URL: with FOLLOWUP_DATABASE_URL set, give Dagster's "
                    "storage its own postgresql+psycopg2:// URL"
                )
        else:
            cluster = EmbeddedCluster(self.settings.home)
            self.cluster = cluster
            if cluster.acquire():
                log.info("started the embedded Postgres on 127.0.0.1:%s", cluster.port)
            url = cluster.url("followup")
            self.env["FOLLOWUP_DATABASE_URL"] = url
            self.env["FOLLOWUP_DAGSTER_PG_URL"] = cluster.url(
                "dagster", driver="postgresql+psycopg2"
            )
        applied = migrate(url)
        log.info("migrations applied: %s", [m.version for m in applied] or "none pending")
        offsets = prepare_cadence(url, self.settings)
        log.info("cadence %r: business days %s", self.settings.cadence_name, offsets)

    def start_sandbox(self) -> None:
        env_file = self.settings.home / "sandbox.env"
        port = self.settings.sandbox_port
        webhook = f"http://127.0.0.1:{self.settings.ingress_port}/webhooks/espocrm"
        process = self._spawn(
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
            ],
        )
        _wait_http(f"http://127.0.0.1:{port}/_sandbox/stats", "the sandbox", process)
        self.env.update(_read_env_file(env_file))

    def start_ingress(self) -> None:
        """``followup ingress`` on the configured address, waited for through ``/healthz``."""
        host, port = self.settings.ingress_host, self.settings.ingress_port
        process = self._spawn(
            "ingress", [_bin("followup"), "ingress", "--host", host, "--port", str(port)]
        )
        _wait_http(f"http://{host}:{port}/healthz", "the ingress", process)

    def start_dagster(self) -> subprocess.Popen[bytes]:
        self.env["DAGSTER_HOME"] = str(install_dagster_home(self.settings.home))
        target = (
            ["-w", str(WORKSPACE)]
            if WORKSPACE.exists()
            else ["-m", "followup_pipeline.definitions"]
        )
        # Only Dagster's processes need the vendor secrets (its resources read them through
        # dg.EnvVar): those from .env or the secrets folder go into its environment alone.
        env = {**secret_environment(self.settings), **self.env}
        return self._spawn(
            "dagster",
            [_bin("dagster"), "dev", "-h", self.host, "-p", str(self.port), *target],
            env=env,
        )

    def stop(self) -> None:
        for _, process in reversed(self.children):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for what, process in reversed(self.children):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in 30 s; killing it", what)
                process.kill()
        if self.cluster is not None and self.cluster.release():
            log.info("stopped the embedded Postgres")

    def run(self) -> int:
        """Start everything, wait until a child exits or Ctrl-C, then stop everything."""
        mode = vendor_mode(self.settings)

        def _interrupt(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _interrupt)
        try:
            self.start_database()
            if mode == "sandbox":
                self.start_sandbox()
            self.start_ingress()
            dagster = self.start_dagster()
            print(
                f"Followup is up ({mode} vendors): Dagster UI at http://{self.host}:{self.port}",
                flush=True,
            )
            return dagster.wait()
        except KeyboardInterrupt:
            return 0
        finally:
            self.stop()
