"""Group commit (``ingress/batcher.py``) on a real Postgres: deliveries that arrive together are
stored in one statement and one commit; a duplicate within a batch keeps its answer; a row the
database refuses fails only its own delivery; a connection lost mid-batch answers the whole
batch 503 and stores nothing twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from followup_pipeline.ingress.batcher import GroupCommit
from followup_pipeline.store import events
from followup_pipeline.store.db import StoreUnavailable, build_async_pool, connect, typed_row
from followup_pipeline.store.queries import query


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _params(n: int, *, body: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
    return events.delivery_params(
        source="espocrm",
        event_type="Opportunity.fieldUpdate.stage",
        body=body or json.dumps([{"id": f"deal-{n}", "stage": "Proposal"}]).encode(),
        headers=headers or {"content-type": "application/json"},
    )


async def _single(pool: Any, params: Any) -> events.Stored:
    async with pool.connection() as conn, conn.cursor(row_factory=typed_row(events.Stored)) as cur:
        await cur.execute(query("events_store"), params)
        stored: events.Stored | None = await cur.fetchone()
    assert stored is not None
    return stored


@pytest.fixture
async def batching(db_url: str) -> AsyncIterator[Callable[..., GroupCommit]]:
    pools: list[Any] = []
    batchers: list[GroupCommit] = []

    def make(window_s: float = 0.2, max_rows: int = 64, url: str = db_url) -> GroupCommit:
        pool = build_async_pool(url, max_size=4, name="test", timeout=2.0, reconnect_timeout=0.5)
        pools.append(pool)
        batcher = GroupCommit(pool, lambda p: _single(pool, p), window_s=window_s,
                              max_rows=max_rows)  # fmt: skip
        batchers.append(batcher)
        return batcher

    yield make
    for batcher in batchers:
        await batcher.stop()
    for pool in pools:
        await pool.close()


@pytest.mark.anyio
async def test_a_batch_is_one_commit_and_a_duplicate_in_it_keeps_its_answer(
    batching: Callable[..., GroupCommit], db_url: str
) -> None:
    batcher = batching()
    await batcher.pool.open(wait=True)
    batcher.start()
    same = _params(1)
    answers = await asyncio.gather(
        batcher.store(same), batcher.store(_params(2)), batcher.store(same)
    )
    assert (batcher.batches, batcher.rows) == (1, 3)
    first, other, again = answers
    assert (first.duplicate, other.duplicate, again.duplicate) == (False, False, True)
    assert again.event_id == first.event_id  # the same event, as across two requests
    with connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT id, duplicate_count FROM events ORDER BY id").fetchall()
    assert [(r["id"], r["duplicate_count"]) for r in rows] == [
        (first.event_id, 1), (other.event_id, 0)
    ]  # fmt: skip


@pytest.mark.anyio
async def test_a_row_the_database_refuses_fails_only_its_own_delivery(
    batching: Callable[..., GroupCommit], db_url: str
) -> None:
    batcher = batching()
    await batcher.pool.open(wait=True)
    batcher.start()
    # jsonb takes no NUL character: Postgres refuses this row's headers, not its neighbours'.
    bad = _params(2)
    bad["headers"] = Jsonb({"user-agent": "a\u0000b"})
    answers = await asyncio.gather(
        batcher.store(_params(1)), batcher.store(bad), batcher.store(_params(3)),
        return_exceptions=True,
    )  # fmt: skip
    assert batcher.batches == 0  # the three went as one batch, refused, then one by one
    assert isinstance(answers[1], psycopg.Error)
    assert not isinstance(answers[0], BaseException)
    assert not isinstance(answers[2], BaseException)
    with connect(db_url, autocommit=True) as conn:
        stored = conn.execute("SELECT count(*) AS n FROM events").fetchone()
    assert stored is not None
    assert stored["n"] == 2


@pytest.mark.anyio
async def test_a_connection_lost_mid_batch_answers_the_whole_batch_unavailable(
    batching: Callable[..., GroupCommit], db_url: str, pg_admin_url: str
) -> None:
    """The batch waits on a lock; its session is ended and the database closed to new
    sessions: every delivery of it is refused (503 to its senders, who retry), none is stored."""
    url, admin_url = db_url, pg_admin_url
    name = conninfo_to_dict(url)["dbname"]
    batcher = batching(url=url)
    await batcher.pool.open(wait=True)
    batcher.start()
    first = _params(1)
    with connect(url, autocommit=True) as holder, connect(admin_url, autocommit=True) as admin:
        # Hold the advisory lock store_delivery takes for this body's dedup key.
        holder.execute(
            "SELECT pg_advisory_lock(%s, hashtext(%s))", (first["namespace"], first["dedup_key"])
        )
        pending = asyncio.gather(
            batcher.store(first), batcher.store(_params(2)), return_exceptions=True
        )
        for _ in range(100):
            waiting = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                (name,),
            ).fetchall()
            if waiting:
                break
            await asyncio.sleep(0.05)
        assert waiting, "the batch never waited on the lock"
        admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(
            sql.Identifier(name)))  # fmt: skip
        # Every session of the database ends (the holder's too): the batch's retry finds no
        # connection to be had.
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        answers = await pending
        admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(
            sql.Identifier(name)))  # fmt: skip
    assert all(isinstance(a, (psycopg.OperationalError, StoreUnavailable)) for a in answers), (
        answers
    )
    with connect(url, autocommit=True) as conn:
        stored = conn.execute("SELECT count(*) AS n FROM events").fetchone()
    assert stored is not None
    assert stored["n"] == 0


@pytest.mark.anyio
async def test_a_lone_delivery_is_a_batch_of_one_answered_as_any(
    batching: Callable[..., GroupCommit], db_url: str
) -> None:
    batcher = batching()
    await batcher.pool.open(wait=True)
    batcher.start()
    first = await batcher.store(_params(1))
    again = await batcher.store(_params(1))
    assert (batcher.batches, batcher.rows) == (2, 2)
    assert (first.duplicate, again.duplicate, again.event_id) == (False, True, first.event_id)
    assert first.status == "pending"
