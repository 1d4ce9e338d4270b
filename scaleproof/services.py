"""The processes of the scale proof, each on its host: Postgres, the vendors' sandbox, two ingress
replicas, the code server and the daemon, the webserver, and nginx at the edge with the very
config of ``deploy/nginx/followup.conf``. Each is started as production starts it
(``followup serve ROLE``; ``deploy/systemd/``) and can be killed with SIGKILL, process group and
all, as a host that dies."""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from followup_pipeline.launcher import reap_group, signal_group
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.environment import env_lines
from followup_pipeline.sandbox.server import WEBHOOK_SECRETS
from followup_pipeline.settings import SECRET_VARIABLES
from followup_pipeline.store.embedded import SUPERUSER, SYSTEM_USER, EmbeddedCluster, bin_path
from scaleproof.hosts import INSIDE, Host

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = Path(sys.executable).parent
PG_PORT = 5432
SANDBOX_PORT = 8765
INGRESS_PORT = 8787
CODE_SERVER_PORT = 4266
UI_PORT = 3000
#: What nginx's config names /etc/followup/: the proof's own folder for it.
EDGE_ETC = "/etc/followup/"


@dataclass
class Service:
    """One process on one host; its output goes to ``log``."""

    name: str
    host: Host
    argv: list[str]
    env: dict[str, str]
    log: Path
    cwd: Path
    process: subprocess.Popen[bytes] | None = None
    _out: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.cwd.mkdir(parents=True, exist_ok=True)
        self._out = self.log.open("ab")
        self.process = subprocess.Popen(
            self.host.command(self.argv),
            env=self.env,
            cwd=self.cwd,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a kill takes every child
        )

    def kill(self) -> None:
        """SIGKILL to the whole process group, as a host that dies."""
        if self.process is not None and self.process.poll() is None:
            signal_group(self.process, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, as a supervisor stops it; SIGKILL after ``timeout``; then what it left in
        its group, as ``followup dev`` stops its children (``launcher.reap_group``)."""
        if self.process is None or self.process.poll() is not None:
            return
        signal_group(self.process, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        reap_group(self.process)
        if self._out is not None:
            self._out.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def run_on(
    host: Host,
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 300,
) -> str:
    """Run ``argv`` on ``host`` to its end; its output; raise with it when it fails."""
    done = subprocess.run(
        host.command(argv),
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{host.name}: {' '.join(argv)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def wait_for(what: str, check: Callable[[], object], timeout: float = 120.0) -> None:
    """Wait until ``check()`` is true; an error of ``check`` means not yet."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as error:  # not up yet
            last = f": {type(error).__name__}: {error}"
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s{last}")


@dataclass
class Machine:
    """The whole machine's settings and folders for one proof run."""

    work: Path
    hosts: dict[str, Host]
    password: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    ui_password: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    @property
    def database_url(self) -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@db:{PG_PORT}/followup"

    @property
    def dagster_url(self) -> str:
        return f"postgresql+psycopg2://{SUPERUSER}:{self.password}@db:{PG_PORT}/dagster"

    def write_secrets(self) -> None:
        """A secrets folder (``FOLLOWUP_SECRETS_DIR``) a role, one file a secret, as systemd's
        units hand them over: each role gets only its own (``deploy/systemd/``)."""
        vendors = self._vendor_settings()
        database = {
            "FOLLOWUP_DATABASE_URL": self.database_url,
            "FOLLOWUP_DAGSTER_PG_URL": self.dagster_url,
        }
        webhooks = {k: v for k, v in vendors.items() if k in WEBHOOK_SECRETS}
        keys = {k: v for k, v in vendors.items() if k in SECRET_VARIABLES.values()}
        roles = {
            "database": database,  # migrate, the daemon, the webserver
            "ingress": {"FOLLOWUP_DATABASE_URL": self.database_url, **webhooks},
            "code-server": {**database, **keys},
        }
        for role, values in roles.items():
            folder = self.work / "secrets" / role
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            for name, value in values.items():
                path = folder / name
                path.write_text(value, encoding="utf-8")
                path.chmod(0o600)

    def _vendor_settings(self) -> dict[str, str]:
        values = {}
        for line in env_lines(self.sandbox, f"http://vendors:{SANDBOX_PORT}"):
            name, _, value = shlex.split(line)[0].partition("=")
            values[name] = value
        return values

    def env(self, host: Host, secrets: str = "database", **extra: str) -> dict[str, str]:
        """The environment of a process on ``host``: no secret in it (they are files)."""
        secret_names = {*SECRET_VARIABLES.values(), *WEBHOOK_SECRETS}
        plain = {k: v for k, v in self._vendor_settings().items() if k not in secret_names}
        keep = ("PATH", "LANG", "LC_ALL", "TZ")
        return {
            **{k: v for k, v in os.environ.items() if k in keep},
            **plain,
            "HOME": str(self.work / host.name),
            "FOLLOWUP_HOME": str(self.work / host.name / "home"),
            "FOLLOWUP_SECRETS_DIR": str(self.work / "secrets" / secrets),
            "FOLLOWUP_CODE_SERVER_HOST": "dagster",
            "FOLLOWUP_CODE_SERVER_PORT": str(CODE_SERVER_PORT),
            # A killed run's claims come back after 20 s instead of 15 minutes.
            "FOLLOWUP_EVENT_LEASE_S": "20",
            # Batches of 10: a backlog of a few hundred events is many batches, and the sensor
            # launches a second register run beside the first (at 50 it would rarely need to).
            "FOLLOWUP_EVENT_BATCH_SIZE": "10",
            "FOLLOWUP_UI_URL": "https://edge:8443",
            **extra,
        }

    def service(self, name: str, host: str, argv: list[str], **extra: str) -> Service:
        where = self.hosts[host]
        return Service(
            name,
            where,
            argv,
            self.env(where, **extra),
            self.work / f"{name}.log",
            cwd=self.work / where.name,
        )

    def followup(self, name: str, host: str, *argv: str, **extra: str) -> Service:
        return self.service(name, host, [str(SCRIPTS / "followup"), *argv], **extra)


def start_postgres(machine: Machine) -> Service:
    """Postgres on ``db``, listening on its address (password) and its own loopback (trust,
    for this setup only), run by an unprivileged user as Postgres requires."""
    cluster = EmbeddedCluster(machine.work / "db" / "pg")
    cluster.initialise()
    hba = cluster.data_dir / "pg_hba.conf"
    hba.write_text(hba.read_text() + f"host all all {INSIDE}.0/24 scram-sha-256\n")
    host = machine.hosts["db"]
    argv = [
        "runuser",
        "-u",
        SYSTEM_USER,
        "--",
        str(bin_path() / "postgres"),
        "-D",
        str(cluster.data_dir),
        "-p",
        str(PG_PORT),
        "-c",
        "unix_socket_directories=",
        "-c",
        f"listen_addresses={host.address},127.0.0.1",
        "-c",
        "max_connections=200",
    ]
    service = machine.service("postgres", "db", argv)
    service.start()
    psql = [str(bin_path() / "psql"), "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", SUPERUSER]
    wait_for("Postgres", lambda: run_on(host, [*psql, "-c", "SELECT 1"]) is not None)
    # The password goes in on stdin (never on a command line, where `ps` shows it), and psql
    # quotes it itself (:'pw'): nothing is pasted into the statement. It is URL-safe base64.
    run_on(
        host,
        [*psql, "-v", "ON_ERROR_STOP=1"],
        stdin=f"\\set pw {machine.password}\nALTER ROLE postgres PASSWORD :'pw';\n"
        "CREATE DATABASE followup;\nCREATE DATABASE dagster;\n",
    )
    return service


def start_edge(machine: Machine) -> Service:
    """nginx on ``edge`` with ``deploy/nginx/followup.conf``, its /etc/followup/ files made
    here: a certificate for the name ``edge`` and an operator's password."""
    folder = machine.work / "edge"
    etc = folder / "etc"
    (etc / "tls").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=edge",
            "-addext",
            "subjectAltName=DNS:edge",
            "-keyout",
            str(etc / "tls" / "edge.key"),
            "-out",
            str(etc / "tls" / "edge.crt"),
        ],
        check=True,
        capture_output=True,
    )
    hashed = subprocess.run(
        ["openssl", "passwd", "-6", "-stdin"],
        input=machine.ui_password,
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    (etc / "htpasswd").write_text(f"operator:{hashed}\n", encoding="utf-8")
    site = (REPO / "deploy" / "nginx" / "followup.conf").read_text(encoding="utf-8")
    (folder / "followup.conf").write_text(site.replace(EDGE_ETC, f"{etc}/"), encoding="utf-8")
    (folder / "nginx.conf").write_text(
        "daemon off;\nworker_processes 1;\n"
        f"pid {folder}/nginx.pid;\nerror_log {folder}/error.log warn;\n"
        "events { worker_connections 1024; }\n"
        "http {\n"
        f"  access_log {folder}/access.log;\n"
        f"  client_body_temp_path {folder / 'tmp' / 'body'};\n"
        f"  proxy_temp_path {folder / 'tmp' / 'proxy'};\n"
        f"  include {folder}/followup.conf;\n"
        "}\n",
        encoding="utf-8",
    )
    (folder / "tmp").mkdir(exist_ok=True)
    # nginx's workers run as nobody: they read the password file and the folders on the way.
    for path in (machine.work, folder, etc, etc / "tls"):
        path.chmod(0o755)
    (etc / "htpasswd").chmod(0o644)
    service = machine.service(
        "nginx", "edge", ["nginx", "-p", str(folder), "-c", str(folder / "nginx.conf")]
    )
    service.start()
    return service
