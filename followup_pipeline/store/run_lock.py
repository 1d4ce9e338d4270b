"""The run lock: a Postgres advisory lock held for a whole run on a connection of its own.

Taken when the run starts and released when its connection closes, or when a crashed run's
connection dies, so there is no time window to get wrong. The queue already keeps ``evaluate``
runs apart; the lock holds off runs started outside it (``execute_in_process``, ``dagster job
execute``, ``dg launch``). The Dagster resource that holds it is ``RunLockResource``.
"""

import hashlib
from dataclasses import dataclass
from typing import Any

import psycopg

from followup_pipeline.store.db import connect
from followup_pipeline.store.queries import query


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name``."""
    digest = hashlib.sha1(f"followup.run_lock.{name}".encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@dataclass
class RunLock:
    """The lock ``name`` tried on a dedicated connection; ``held`` says whether it was taken,
    ``holder`` who had it otherwise. ``release`` closes the connection (and the lock with it)."""

    conn: psycopg.Connection[Any] | None
    held: bool
    holder: str

    @classmethod
    def try_take(cls, url: str, name: str, *, owner: str) -> "RunLock":
        """Open a connection named after ``owner`` and try to take the lock ``name`` on it."""
        conn = connect(url, autocommit=True, application_name=f"followup-lock {owner}")
        key = lock_key(name)
        row = conn.execute(query("try_run_lock"), {"key": key}).fetchone()
        held = bool(row and row["held"])
        return cls(conn, held, "" if held else _holder(conn, key))

    def release(self) -> None:
        """Close the connection; Postgres frees the lock with it."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.held = False


def _holder(conn: psycopg.Connection[Any], key: int) -> str:
    params = {"high": (key >> 32) & 0xFFFFFFFF, "low": key & 0xFFFFFFFF}
    row = conn.execute(query("run_lock_holder"), params).fetchone()
    if row is None:
        return "another run (gone now)"
    return (
        f"{row['application_name'] or 'a session'} "
        f"(pid {row['pid']}, connected {row['backend_start']:%Y-%m-%d %H:%M:%S %Z})"
    )


class KeyLocks:
    """Locks by name (the keys of ``RunLock``, so each excludes the other) for a run that locks
    many names one after another, a reminder at a time: one connection of its own for the whole
    run, not one a name. Each lock is let go when its work is done; closing the connection (or
    its death with a crashed run) lets go of any left."""

    def __init__(self, url: str, *, owner: str) -> None:
        self.url = url
        self.owner = owner
        self.conn: psycopg.Connection[Any] | None = None

    def take(self, name: str) -> bool:
        """Take the lock ``name`` if it is free; whether it was."""
        if self.conn is None or self.conn.closed:
            self.conn = connect(
                self.url, autocommit=True, application_name=f"followup-lock {self.owner}"
            )
        row = self.conn.execute(query("try_run_lock"), {"key": lock_key(name)}).fetchone()
        return bool(row and row["held"])

    def release(self, name: str) -> None:
        """Let go of ``name`` (a connection gone has let go of it already)."""
        if self.conn is None or self.conn.closed:
            return
        try:
            self.conn.execute(query("run_lock_release"), {"key": lock_key(name)})
        except psycopg.OperationalError:
            self.close()  # its session, and every lock it held, is gone

    def close(self) -> None:
        """Close the connection: every lock still held is let go."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
