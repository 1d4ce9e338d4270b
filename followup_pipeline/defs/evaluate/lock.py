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

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._conn = connect(
            self.url, autocommit=True, application_name=f"followup-lock-{self.name}"
        )
        row = self._conn.execute("SELECT pg_try_advisory_lock(%s) AS held", (lock_key(self.name),))
        self._held = bool(row.fetchone()["held"])

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._held = False

    @property
    def held(self) -> bool:
        """Whether this run holds the lock."""
        return self._held
