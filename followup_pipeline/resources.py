"""Dagster resources for the machine's own parts: Postgres, the clock, the settings.

The vendors' resources live in ``integrations/resources.py``.
"""

import contextlib
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import dagster as dg
import psycopg
from pydantic import PrivateAttr

from followup_pipeline.clock import Clock, build_clock
from followup_pipeline.settings import Settings, load_settings
from followup_pipeline.store.db import open_pool, translated_errors


class PostgresResource(dg.ConfigurableResource["PostgresResource"]):
    """The machine's flow state: a pool opened for the run, closed after it."""

    url: str
    max_connections: int = 4

    _pool: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._pool = open_pool(self.url, max_size=self.max_connections)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; commits on success, rolls back on error."""
        if self._pool is None:
            self._pool = open_pool(self.url, max_size=self.max_connections)
        with translated_errors(), self._pool.connection() as conn:
            yield conn


class ClockResource(dg.ConfigurableResource["ClockResource"]):
    """The current instant: real, or started at ``start`` (ISO 8601 with offset)."""

    start: str | None = None
    ticking: bool = True

    _clock: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._clock = self._build()

    def _build(self) -> Clock:
        start = datetime.fromisoformat(self.start) if self.start else None
        return build_clock(start, ticking=self.ticking)

    def now(self) -> datetime:
        """The current instant, aware, in UTC."""
        if self._clock is None:
            self._clock = self._build()
        result: datetime = self._clock.now()
        return result


class SettingsResource(dg.ConfigurableResource["SettingsResource"]):
    """The machine's settings (from the environment), with optional overrides as JSON."""

    overrides_json: str = ""

    def get(self) -> Settings:
        """The settings, with the overrides applied."""
        overrides = json.loads(self.overrides_json) if self.overrides_json else {}
        return load_settings(**overrides)
