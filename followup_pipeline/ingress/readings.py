"""What ``GET /metrics`` reads of the database besides the counters: the event log's gauges,
each academy's reminders by state, the operator's gauges, the list of work, and the account of
the actions due this week (``domain/account.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from datetime import time as day_time
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from followup_pipeline.domain.account import AccountRows, build
from followup_pipeline.settings import Settings
from followup_pipeline.store import events, work
from followup_pipeline.store.account import ACCOUNT_QUERIES
from followup_pipeline.store.account import params as account_params
from followup_pipeline.store.db import typed_row
from followup_pipeline.store.gauges import Series
from followup_pipeline.store.lms import LMS_STATES, STATUS_WINDOW, TenantStatus
from followup_pipeline.store.queries import query

#: The window ``/metrics`` accounts for (``followup account``'s default too).
ACCOUNT_WINDOW = timedelta(days=7)
#: How often a scrape makes the account again (between, it shows the last one).
ACCOUNT_EVERY_S = 300.0


class Readings:
    """The database's side of ``/metrics`` for one ingress process."""

    def __init__(
        self, settings: Settings, pool: AsyncConnectionPool[Any], now: Callable[[], float]
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.now = now
        self._account_cache: tuple[float, dict[str, float]] = (0.0, {})

    async def gauges(self) -> dict[str, float]:
        async with (
            self.pool.connection() as conn,
            conn.cursor(row_factory=typed_row(events.Gauges)) as cursor,
        ):
            await cursor.execute(query("events_gauges"))
            row: events.Gauges | None = await cursor.fetchone()
        assert row is not None
        values = row.values()
        async with (
            self.pool.connection() as conn,
            conn.cursor(row_factory=typed_row(TenantStatus)) as cursor,
        ):
            now = datetime.fromtimestamp(self.now(), UTC)  # the machine's clock
            await cursor.execute(query("lms_status"), {"now": now, "since": now - STATUS_WINDOW})
            for tenant in await cursor.fetchall():
                for state in LMS_STATES:
                    values[f"lms|{tenant.tenant_id}|{state}"] = float(getattr(tenant, state))
        async with (
            self.pool.connection() as conn,
            conn.cursor(row_factory=typed_row(Series)) as cursor,
        ):
            params = {"max_attempts": self.settings.action_max_attempts}
            await cursor.execute(query("operator_gauges"), params)
            for one in await cursor.fetchall():
                values[f"op|{one.name}|{one.label}"] = float(one.value)
        async with (
            self.pool.connection() as conn,
            conn.cursor(row_factory=typed_row(work.Count)) as cursor,
        ):
            await cursor.execute(query("work_counts"))
            for count in await cursor.fetchall():
                key = f"work|{count.state}|{count.pipeline}|{count.kind}|{count.owner}"
                values[key] = values.get(key, 0.0) + count.items
        values.update(await self._account(now))
        return values

    async def _account(self, now: datetime) -> dict[str, float]:
        """The account of the actions due in the last ``ACCOUNT_WINDOW``
        (``domain/account.py``): ``acct|pipeline|kind|ending`` counts, and the unaccounted.
        Made at most once every ``ACCOUNT_EVERY_S`` (a week of rows is read for it), its sums
        made off the event loop."""
        made, cached = self._account_cache
        if cached and time.monotonic() - made < ACCOUNT_EVERY_S:
            return cached
        values = await self._account_now(now)
        self._account_cache = (time.monotonic(), values)
        return values

    async def _account_now(self, now: datetime) -> dict[str, float]:
        since = now - ACCOUNT_WINDOW
        found = []
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            for name in ACCOUNT_QUERIES:
                await cursor.execute(query(name), account_params(since, now))
                found.append(list(await cursor.fetchall()))
        opens = day_time(self.settings.business_hours_start)
        result = await asyncio.to_thread(
            build, AccountRows(*found), opens=opens, since=since, until=now
        )
        values = {"acct_unaccounted": float(len(result.unaccounted))}
        for line in result.sorted_lines():
            for ending, n in line.endings.items():
                values[f"acct|{line.pipeline}|{line.kind}|{ending}"] = float(n)
        return values
