"""Group commit: the deliveries that arrive together are stored in one statement, one
transaction, one commit, and only then is each answered (docs/architecture.md §3).

A batch opens with the first delivery and closes at once when no batch is committing (a lone
delivery is not held back), else after ``window_s``, or at ``max_rows``, whichever comes first;
up to ``in_flight`` batches commit at once while the next collects.
The batch is stored by one call of ``store_deliveries`` (migration 0033), which answers for each
delivery what storing them one after another answers: a delivery repeated within a batch is a
duplicate of the one before it, as it would be across two.
A batch the database refuses (one row it will not take: a constraint, a body it cannot read) is
stored again row by row, so only that row's delivery fails; a connection lost mid-batch answers
the whole batch 503 (its senders retry; a row that did commit is then found a duplicate).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from followup_pipeline.store import events
from followup_pipeline.store.db import StoreUnavailable, typed_row
from followup_pipeline.store.queries import query

log = logging.getLogger(__name__)

#: The columns of one delivery, as the batch statement takes them (its body apart).
COLUMNS = (
    "source",
    "event_type",
    "dedup_key",
    "status",
    "last_error",
    "dead_step",
    "delivery_id",
)


def batch_params(rows: list[dict[str, object]]) -> dict[str, object]:
    """The parameters of ``events_store_batch`` for ``rows`` (``events.delivery_params`` each):
    those with a delivery id first, sorted by it, then the others in arrival order (the order
    ``_insert`` gives them). The rows as three JSON arrays (migration 0033: the identified, the
    bodies repeated within the batch, the rest; None for an empty one), their bodies as one
    bytea."""
    times: dict[object, int] = {}
    for row in rows:
        if row["delivery_id"] is None:
            times[row["dedup_key"]] = times.get(row["dedup_key"], 0) + 1
    identified: list[dict[str, object]] = []
    repeated: list[dict[str, object]] = []
    listed: list[dict[str, object]] = []
    bodies: list[bytes] = []
    at = 1  # (SQL's substring counts from 1)
    for ord_, row in enumerate(rows, 1):
        body = row["body"]
        headers = row["headers"]
        received = row["received_at"]
        assert isinstance(body, bytes)
        assert isinstance(headers, Jsonb)
        assert received is None or isinstance(received, datetime)
        item = {name: row[name] for name in COLUMNS}
        item["ord"] = ord_
        item["body_at"] = at
        item["body_len"] = len(body)
        item["headers"] = headers.obj
        item["received_at"] = None if received is None else received.isoformat()
        if item["delivery_id"] is not None:
            identified.append(item)
        elif times[row["dedup_key"]] > 1:
            repeated.append(item)
        else:
            listed.append(item)
        bodies.append(body)
        at += len(body)
    return {
        "identified": json.dumps(identified) if identified else None,
        "repeated": json.dumps(repeated) if repeated else None,
        "rows": json.dumps(listed) if listed else None,
        "bodies": b"".join(bodies),
        "window": rows[0]["window"],
        "namespace": rows[0]["namespace"],
    }


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
        #: The batch being collected (answered 503 if the ingress stops meanwhile).
        self._held: list[tuple[dict[str, object], asyncio.Future[events.Stored]]] = []
        self._closed = False
        #: Batches committed and rows in them (the benchmark's and the tests' figures).
        self.batches = 0
        self.rows = 0

    def start(self) -> None:
        """Begin collecting (inside the app's event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._collect())

    async def stop(self) -> None:
        """Stop collecting; what is queued or held is answered 503 (its senders retry), what
        commits is let finish; a delivery after the stop is refused at once."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), 5.0)
        if self._commits:
            await asyncio.gather(*self._commits, return_exceptions=True)
        stopping = [*self._held]
        while not self._queue.empty():
            stopping.append(self._queue.get_nowait())
        _fail(stopping, _unavailable(StoreUnavailable("the ingress is stopping")))

    async def store(self, params: dict[str, object]) -> events.Stored:
        """Store one delivery with those that arrive with it; its fate once its batch
        committed (``StoreUnavailable``/``psycopg.Error`` as a single store raises them)."""
        if self._closed:
            raise StoreUnavailable("the ingress is stopping")
        future: asyncio.Future[events.Stored] = asyncio.get_running_loop().create_future()
        await self._queue.put((params, future))
        return await future

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._held = batch = [await self._queue.get()]
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
                    async with asyncio.timeout(left):
                        batch.append(await self._queue.get())
                except TimeoutError:
                    break
            await self._slots.acquire()
            self._held = []
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
                _fail(batch, _unavailable(error))
                return
            except psycopg.OperationalError as error:
                if lost(error) or busy(error):  # the connection broke, or a wait ran out: 503
                    _fail(batch, _unavailable(error))
                    return
                stored = None
            except psycopg.Error:
                stored = None  # a row the database refused: each on its own
            except Exception as error:  # anything else: no request may hang on it
                log.error("a batch failed: %s: %s", type(error).__name__, error)
                _fail(batch, _unavailable(error))
                return
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
        """The batch in one statement (``once_more``: a second try on a fresh connection when
        the first broke)."""
        # Two batches take their rows' locks in one global order, so they cannot deadlock each
        # other: the delivery ids' index entries first, sorted here (repeats of one delivery in
        # arrival order), then the bodies' advisory locks, sorted by the database (the others
        # keep their arrival order); the answers go back by position.
        if len(rows) == 1:  # a lone delivery: one delivery's function, one statement
            return [await self.single(rows[0])]
        order = sorted(range(len(rows)), key=lambda n: (_lock_key(rows[n]), n))
        params = batch_params([rows[n] for n in order])

        async def store(conn: psycopg.AsyncConnection[Any]) -> list[Batched]:
            async with conn.cursor(row_factory=typed_row(Batched)) as cursor:
                await cursor.execute(query("events_store_batch"), params)
                return await cursor.fetchall()

        found = await once_more(self.pool, store)
        if len(found) != len(rows):  # (the function answers one row a call, always)
            raise StoreUnavailable(f"a batch of {len(rows)} answered {len(found)} rows")
        answers = [row.stored for row in sorted(found, key=lambda r: r.ord)]
        back: list[events.Stored | None] = [None] * len(rows)
        for rank, n in enumerate(order):
            back[n] = answers[rank]
        return [answer for answer in back if answer is not None]

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


def _lock_key(row: dict[str, object]) -> tuple[int, str]:
    """Where a row goes in its batch: those with a delivery id first, by it; the others after,
    as they came (the database orders their locks)."""
    delivery = row.get("delivery_id")
    if delivery is not None:
        return (0, f"{row['source']}:{delivery}")
    return (1, "")


T = TypeVar("T")


async def once_more(
    pool: AsyncConnectionPool[Any], work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]
) -> T:
    """``work`` on a pooled connection, in autocommit its own transaction; when that connection
    was lost (``lost``: Postgres restarted since it was pooled, or ended the session), the other
    pooled connections are checked and ``work`` is done once more on a fresh one. What it
    stores is keyed (a delivery id, a body's hash within the window): had the first try
    committed, the second counts duplicates, and nothing is stored twice. No connection to be
    had (``PoolTimeout``), a refusal, a lock or statement timeout: raised at once."""
    try:
        async with pool.connection() as conn:
            return await work(conn)
    except PoolTimeout:
        raise
    except psycopg.OperationalError as error:
        if not lost(error):
            raise
    await pool.check()
    async with pool.connection() as conn:
        return await work(conn)


def lost(error: psycopg.OperationalError) -> bool:
    """Whether ``error`` is a connection lost (the server never answered, a connection
    exception, or the server shutting the session down), not a refusal of the rows."""
    state = error.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def busy(error: psycopg.OperationalError) -> bool:
    """Whether ``error`` is a wait that ran out (a statement or lock timeout, a cancel): the
    database is there but slow; the batch is answered 503, never retried nor split."""
    return error.sqlstate in ("57014", "55P03")


def _unavailable(error: BaseException) -> Callable[[], Exception]:
    """A maker of one fresh ``StoreUnavailable`` a delivery (503), saying ``error``."""
    text = f"{type(error).__name__}: {error}"
    return lambda: StoreUnavailable(text)


def _fail(
    batch: list[tuple[dict[str, object], asyncio.Future[events.Stored]]],
    error: Callable[[], Exception],
) -> None:
    """Answer each delivery of ``batch`` with its own exception (503 to its sender)."""
    if batch:
        log.warning("%d deliveries were not stored: %s", len(batch), error())
    for _, future in batch:
        if not future.done():
            future.set_exception(error())
