"""Group commit: the deliveries that arrive together are stored in one statement, one
transaction, one commit, and only then is each answered (docs/architecture.md §3).

A batch opens with the first delivery and closes at once when no batch is committing (a lone
delivery is not held back), else after ``window_s``, or at ``max_rows``, whichever comes first;
up to ``in_flight`` batches commit at once while the next collects.
Each delivery goes through the same database function as a single store, in arrival order, so a
delivery repeated within a batch is a duplicate of the one before it, as it would be across two.
A batch the database refuses (one row it will not take: a constraint, a body it cannot read) is
stored again row by row, so only that row's delivery fails; a connection lost mid-batch answers
the whole batch 503 (its senders retry; a row that did commit is then found a duplicate).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from followup_pipeline.store import events
from followup_pipeline.store.db import StoreUnavailable, typed_row
from followup_pipeline.store.queries import query

log = logging.getLogger(__name__)

#: The columns of one delivery, as the batch statement takes them (each an array).
COLUMNS = (
    "source",
    "event_type",
    "dedup_key",
    "body",
    "headers",
    "status",
    "last_error",
    "dead_step",
    "delivery_id",
    "received_at",
)


@dataclass(frozen=True)
class Batched:
    """One ``store_delivery`` row of a batch: its position and what became of it."""

    ord: int
    event_id: int
    status: str
    duplicate: bool

    @property
    def stored(self) -> events.Stored:
        return events.Stored(self.event_id, self.status, self.duplicate)


Single = Callable[[dict[str, object]], Awaitable[events.Stored]]


class GroupCommit:
    """The ingress's group commit over ``pool``; ``single`` stores one delivery on its own (the
    fallback for a batch the database refused)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        single: Single,
        *,
        window_s: float,
        max_rows: int,
        in_flight: int = 4,
    ) -> None:
        self.pool = pool
        self.single = single
        self.window_s = window_s
        self.max_rows = max_rows
        self._queue: asyncio.Queue[tuple[dict[str, object], asyncio.Future[events.Stored]]]
        self._queue = asyncio.Queue()
        self._slots = asyncio.Semaphore(in_flight)
        self._task: asyncio.Task[None] | None = None
        self._commits: set[asyncio.Task[None]] = set()
        #: Batches committed and rows in them (the benchmark's and the tests' figures).
        self.batches = 0
        self.rows = 0

    def start(self) -> None:
        """Begin collecting (inside the app's event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._collect())

    async def stop(self) -> None:
        """Stop collecting; what is queued is answered 503 (its senders retry), what commits is
        let finish."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._commits:
            await asyncio.gather(*self._commits, return_exceptions=True)
        while not self._queue.empty():
            _, future = self._queue.get_nowait()
            if not future.done():
                future.set_exception(StoreUnavailable("the ingress is stopping"))

    async def store(self, params: dict[str, object]) -> events.Stored:
        """Store one delivery with those that arrive with it; its fate once its batch
        committed (``StoreUnavailable``/``psycopg.Error`` as a single store raises them)."""
        future: asyncio.Future[events.Stored] = asyncio.get_running_loop().create_future()
        await self._queue.put((params, future))
        return await future

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            # Natural batching: with no batch committing, the window is not waited (a lone
            # delivery is not held back); while one commits, the next collects for the window.
            deadline = loop.time() + (self.window_s if self._commits else 0.0)
            while len(batch) < self.max_rows:
                if not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                    continue
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), left))
                except TimeoutError:
                    break
            await self._slots.acquire()
            task = loop.create_task(self._commit(batch))
            self._commits.add(task)
            task.add_done_callback(self._commits.discard)

    async def _commit(
        self, batch: list[tuple[dict[str, object], asyncio.Future[events.Stored]]]
    ) -> None:
        try:
            rows = [params for params, _ in batch]
            try:
                stored = await self._insert(rows)
            except (PoolTimeout, StoreUnavailable) as error:
                _fail(batch, error)
                return
            except psycopg.OperationalError as error:
                if lost(error):  # the connection broke: the whole batch, 503
                    _fail(batch, error)
                    return
                stored = None
            except psycopg.Error:
                stored = None  # a row the database refused: each on its own
            if stored is None:
                await self._one_by_one(batch)
                return
            self.batches += 1
            self.rows += len(batch)
            for (_, future), result in zip(batch, stored, strict=True):
                if not future.done():
                    future.set_result(result)
        finally:
            self._slots.release()

    async def _insert(self, rows: list[dict[str, object]]) -> list[events.Stored]:
        """The batch in one statement; retried once on a fresh connection when the first broke
        (its rows, had they committed, are then counted duplicates, never stored twice)."""
        params: dict[str, object] = {name: [row[name] for row in rows] for name in COLUMNS}
        params["window"] = rows[0]["window"]
        params["namespace"] = rows[0]["namespace"]
        for attempt in (1, 2):
            try:
                async with (
                    self.pool.connection() as conn,
                    conn.cursor(row_factory=typed_row(Batched)) as cursor,
                ):
                    await cursor.execute(query("events_store_batch"), params)
                    found: list[Batched] = await cursor.fetchall()
            except PoolTimeout:
                raise
            except psycopg.OperationalError as error:
                if attempt == 2 or not lost(error):
                    raise
                await self.pool.check()
                continue
            if len(found) != len(rows):
                raise StoreUnavailable(f"a batch of {len(rows)} answered {len(found)} rows")
            return [row.stored for row in sorted(found, key=lambda r: r.ord)]
        raise AssertionError("unreachable")

    async def _one_by_one(
        self, batch: list[tuple[dict[str, object], asyncio.Future[events.Stored]]]
    ) -> None:
        """Each delivery of a refused batch stored on its own: only the one the database will
        not take fails."""
        for params, future in batch:
            try:
                result = await self.single(params)
            except Exception as error:  # the single store's own errors, answered as they are
                if not future.done():
                    future.set_exception(error)
                continue
            if not future.done():
                future.set_result(result)


def lost(error: psycopg.OperationalError) -> bool:
    """Whether ``error`` is a connection lost (the server never answered, a connection
    exception, or the server shutting the session down), not a refusal of the rows."""
    state = error.sqlstate
    return state is None or state.startswith(("08", "57"))


def _fail(
    batch: list[tuple[dict[str, object], asyncio.Future[events.Stored]]], error: Exception
) -> None:
    log.warning("a batch of %d deliveries was not stored: %s", len(batch), type(error).__name__)
    for _, future in batch:
        if not future.done():
            future.set_exception(error)
