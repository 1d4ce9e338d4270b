"""Dagster resources for the machine's own parts: Postgres, its run lock, the clock.

The vendors' resources live in ``integrations/resources.py``. Settings are no resource: each
capability's ``build_defs(settings)`` receives the one ``Settings`` that ``definitions.py`` reads.
"""

import contextlib
import warnings
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import dagster as dg
import psycopg
from pydantic import PrivateAttr

from followup_pipeline.clock import Clock, build_clock
from followup_pipeline.store.db import open_pool, translated_errors
from followup_pipeline.store.presence import TAG as PRESENCE_TAG
from followup_pipeline.store.presence import TAG_NONE as PRESENCE_TAG_NONE
from followup_pipeline.store.presence import TAG_VALUE as PRESENCE_TAG_VALUE
from followup_pipeline.store.presence import open_presence
from followup_pipeline.store.run_lock import RunLock

# Dagster 1.13 itself reads its deprecated ``InitResourceContext.dagster_run`` when it sets up a
# nested resource (``RunLockResource`` holds ``PostgresResource``); nothing of ours calls it.
warnings.filterwarnings(
    "ignore", message="InitResourceContext.dagster_run is deprecated", category=DeprecationWarning
)


class PostgresResource(dg.ConfigurableResource["PostgresResource"]):
    """The machine's flow state: a pool opened on first use in a run, closed after it (so a
    resource that only needs the URL, such as the run lock, opens no pool).

    In a run, it also holds the run's presence (``store/presence.py``): a session of its own,
    named after the run, from setup to teardown. The ``dead_runs`` sensor fails a run whose
    presence is gone, since Dagster's default run launcher cannot tell that its process died."""

    url: str
    max_connections: int = 4

    _pool: Any = PrivateAttr(default=None)
    _presence: psycopg.Connection[Any] | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        run = context.run
        if run is None or context.instance is None:
            return  # a sensor, a schedule, a command: no run to stand for
        try:
            self._presence = open_presence(self.url, run.run_id)
            context.instance.add_run_tags(run.run_id, {PRESENCE_TAG: PRESENCE_TAG_VALUE})
        except Exception as error:
            # The run does its work without it, and is never judged by its presence: the tag it
            # may have inherited from the run it retries is overwritten.
            self._close_presence()
            if context.log is not None:
                context.log.warning(f"no presence in Postgres for this run: {error}")
            with contextlib.suppress(Exception):
                context.instance.add_run_tags(run.run_id, {PRESENCE_TAG: PRESENCE_TAG_NONE})

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._close_presence()

    def _close_presence(self) -> None:
        if self._presence is not None:
            # Closing a session the server dropped already raises nothing worth stopping for.
            with contextlib.suppress(psycopg.Error):
                self._presence.close()
            self._presence = None

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; commits on success, rolls back on error."""
        if self._pool is None:
            self._pool = open_pool(self.url, max_size=self.max_connections)
        with translated_errors(), self._pool.connection() as conn:
            yield conn


#: The tag of a run whose clock was set (``FOLLOWUP_NOW``): when that clock started.
CLOCK_TAG = "followup/clock"


class ClockResource(dg.ConfigurableResource["ClockResource"]):
    """The current instant: real, or started at ``start`` (ISO 8601 with offset); a run on a
    set clock is tagged ``followup/clock`` with its start, so it never looks like any other."""

    start: str | None = None
    ticking: bool = True

    _clock: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._clock = self._build()
        run = context.run
        if self.start and context.instance is not None and run is not None:
            context.instance.add_run_tags(run.run_id, {CLOCK_TAG: f"set to {self.start}"})

    def _build(self) -> Clock:
        start = datetime.fromisoformat(self.start) if self.start else None
        return build_clock(start, ticking=self.ticking)

    def now(self) -> datetime:
        """The current instant, aware, in UTC."""
        if self._clock is None:
            self._clock = self._build()
        result: datetime = self._clock.now()
        return result


class RunLockResource(dg.ConfigurableResource["RunLockResource"]):
    """Tries to take the run lock ``name`` for the whole run, on a connection of its own to the
    database of ``postgres`` (outside its pool); ``held`` says whether it did."""

    postgres: PostgresResource
    name: str = "evaluate"

    _lock: RunLock | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        owner = context.run.run_id if context.run else "outside a run"
        self._lock = RunLock.try_take(self.postgres.url, self.name, owner=owner)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._lock is not None:
            self._lock.release()

    @property
    def held(self) -> bool:
        """Whether this run holds the lock."""
        return self._lock is not None and self._lock.held

    @property
    def holder(self) -> str:
        """Who held the lock when this run could not take it, for the skip reason."""
        return self._lock.holder if self._lock is not None else ""
