"""The run lock: a Postgres advisory lock held for a whole run on a connection of its own.

Taken in the resource's setup and released when its connection closes in teardown, or when a
crashed run's connection dies, so there is no time window to get wrong. The queue already keeps
``evaluate`` runs apart; the lock holds off runs started outside it (``execute_in_process``,
``dagster job execute``, ``dg launch``).
"""

import hashlib
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from followup_pipeline.store.db import connect


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name``."""
    digest = hashlib.sha1(f"followup.run_lock.{name}".encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class RunLockResource(dg.ConfigurableResource["RunLockResource"]):
    """Tries to take the lock ``name`` for the run; ``held`` says whether it did."""

    url: str
    name: str = "evaluate"

    _conn: Any = PrivateAttr(default=None)
    _held: bool = PrivateAttr(default=False)
    _holder: str = PrivateAttr(default="")

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        run = context.run.run_id if context.run else "outside a run"
        self._conn = connect(self.url, autocommit=True, application_name=f"followup-lock {run}")
        row = self._conn.execute("SELECT pg_try_advisory_lock(%s) AS held", (lock_key(self.name),))
        self._held = bool(row.fetchone()["held"])
        if not self._held:
            self._holder = self._who_holds()

    def _who_holds(self) -> str:
        key = lock_key(self.name)
        # An advisory lock on a bigint key shows in pg_locks as two 32-bit halves.
        row = self._conn.execute(
            "SELECT a.pid, a.application_name, a.backend_start FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted"
            " AND l.classid = %(high)s AND l.objid = %(low)s AND l.objsubid = 1",
            {"high": (key >> 32) & 0xFFFFFFFF, "low": key & 0xFFFFFFFF},
        ).fetchone()
        if row is None:
            return "another run (gone now)"
        return (
            f"{row['application_name'] or 'a session'} "
            f"(pid {row['pid']}, connected {row['backend_start']:%Y-%m-%d %H:%M:%S %Z})"
        )

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._held = False

    @property
    def held(self) -> bool:
        """Whether this run holds the lock."""
        return self._held

    @property
    def holder(self) -> str:
        """Who held the lock when this run could not take it, for the skip reason."""
        return self._holder
