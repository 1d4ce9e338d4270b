"""``store_deliveries`` (migration 0033), the group commit's set-based store, answers what storing
the same deliveries one by one through ``store_delivery`` answers, and leaves the same rows."""

from __future__ import annotations

import random
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from followup_pipeline.ingress.batcher import _lock_key, batch_params
from followup_pipeline.store import events
from followup_pipeline.store.db import connection_kwargs
from followup_pipeline.store.queries import query

AT = datetime(2026, 3, 9, 9, 0, tzinfo=UTC)


def _delivery(
    source: str, body: bytes, *, at: datetime, delivery_id: str | None = None, dead: bool = False
) -> dict[str, object]:
    return events.delivery_params(
        source=source,
        event_type="Opportunity.fieldUpdate.stage",
        body=body,
        headers={"content-type": "application/json"},
        status="dead" if dead else "pending",
        error="not JSON" if dead else None,
        delivery_id=delivery_id,
        received_at=at,
    )


def _ms(n: int) -> datetime:
    return AT + timedelta(milliseconds=n)


def _scenario(source: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """What was stored before (one by one), and a batch of deliveries in arrival order."""
    before = [
        _delivery(source, b'[{"id":"known"}]', at=AT - timedelta(minutes=10)),
        _delivery(source, b'[{"id":"old"}]', at=AT - timedelta(hours=2)),  # outside the window
        _delivery(source, b'{"type":"x"}', at=AT - timedelta(days=3), delivery_id="msg-known"),
        # at the window's edge: its first repeat below is within the hour, its second is not
        _delivery(
            source, b'[{"id":"edge"}]', at=AT - timedelta(hours=1) + timedelta(milliseconds=1)
        ),
    ]
    batch = [
        _delivery(source, b'[{"id":"new"}]', at=AT),
        _delivery(source, b'[{"id":"known"}]', at=_ms(1)),
        _delivery(source, b'[{"id":"new"}]', at=_ms(2)),
        _delivery(source, b'[{"id":"old"}]', at=_ms(3)),
        _delivery(source, b"not json", at=_ms(4), dead=True),
        _delivery(source, b'{"type":"x"}', at=AT, delivery_id="msg-known"),
        _delivery(source, b'{"type":"y"}', at=AT, delivery_id="msg-new"),
        _delivery(source, b'[{"id":"new"}]', at=_ms(5)),
        _delivery(source, b'[{"id":"known"}]', at=_ms(6)),
        _delivery(source, b'{"type":"y"}', at=_ms(7), delivery_id="msg-new"),
        _delivery(source, b'[{"id":"edge"}]', at=AT),
        _delivery(source, b'[{"id":"edge"}]', at=_ms(2)),
        _delivery(source, b'[{"id":"back"}]', at=_ms(9)),  # the clock goes back within a batch
        _delivery(source, b'[{"id":"back"}]', at=_ms(3)),
    ]
    return before, batch


def _one(conn: psycopg.Connection[Any], params: dict[str, object]) -> tuple[int, str, bool]:
    row = conn.execute(query("events_store"), params).fetchone()
    assert row is not None
    return (row["event_id"], row["status"], row["duplicate"])


def _rows(conn: psycopg.Connection[Any], source: str) -> list[tuple[Any, ...]]:
    found = conn.execute(
        "SELECT id, body, status, delivery_id, received_at, duplicate_count, last_duplicate_at"
        " FROM events WHERE source = %s ORDER BY id",
        (source,),
    ).fetchall()
    return [tuple(row.values()) for row in found]


def _by_content(rows: list[tuple[Any, ...]], answers: list[tuple[int, str, bool]]) -> Any:
    """Ids replaced by the body and id of their event: the two sources' ids differ, and a batch
    stores its deliveries with an id before the others (the order of ids within one batch is
    no promise: its deliveries arrived together)."""
    named = {row[0]: (bytes(row[1]), row[3]) for row in rows}
    return (
        [(named[event_id], status, duplicate) for event_id, status, duplicate in answers],
        sorted((named[row[0]], *row[2:]) for row in rows),
    )


def test_a_batch_answers_and_stores_what_one_by_one_would(db: psycopg.Connection[Any]) -> None:
    db.autocommit = True
    before, batch = _scenario("one-by-one")
    for params in before:
        _one(db, params)
    singles = [_one(db, params) for params in batch]

    before, batch = _scenario("batched")
    for params in before:
        _one(db, params)
    found = db.execute(query("events_store_batch"), batch_params(batch)).fetchall()
    batched = [(row["event_id"], row["status"], row["duplicate"]) for row in found]
    assert [row["ord"] for row in found] == list(range(1, len(batch) + 1))

    expected = _by_content(_rows(db, "one-by-one"), singles)
    assert _by_content(_rows(db, "batched"), batched) == expected
    answers, rows = expected
    # (what the scenario means, read from one-by-one: a check of the check)
    assert [duplicate for _, _, duplicate in answers] == [
        False, True, True, False, False, True, False, True, True, True, True, False, False, True
    ]  # fmt: skip
    assert sum(row[4] for row in rows) == 8  # every duplicate answered is counted on its event


def _random_delivery(rng: random.Random) -> dict[str, object]:
    n = rng.randrange(12)
    if rng.random() < 0.3:  # a delivery with an id
        return events.delivery_params(
            source="forms", event_type="t", body=b'{"type":"t","n":%d}' % n, headers={},
            status="unhandled", delivery_id=f"msg-{n}",
        )  # fmt: skip
    return events.delivery_params(
        source="espocrm", event_type="Opportunity.create", body=b'[{"id":"%d"}]' % n, headers={}
    )


def test_concurrent_batches_and_single_stores_keep_one_event_a_key(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    """Six sessions store random batches (and now and then one by one) of the same few bodies
    and ids at once: no deadlock, one new event a key, every answer counted on its event."""
    errors: list[str] = []
    answers: list[tuple[object, int, bool]] = []
    guard = threading.Lock()

    def session(seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(db_url, autocommit=True, **connection_kwargs()) as conn:
            for _ in range(40):
                rows = [_random_delivery(rng) for _ in range(rng.randrange(2, 24))]
                order = sorted(range(len(rows)), key=lambda n: (_lock_key(rows[n]), n))
                try:
                    if rng.random() < 0.2:
                        found = [conn.execute(query("events_store"), rows[n]).fetchone()
                                 for n in order]  # fmt: skip
                    else:
                        params = batch_params([rows[n] for n in order])
                        found = conn.execute(query("events_store_batch"), params).fetchall()
                except psycopg.Error as error:
                    with guard:
                        errors.append(repr(error))
                    continue
                with guard:
                    for n, row in zip(order, found, strict=True):
                        assert row is not None
                        answers.append((rows[n]["dedup_key"], row["event_id"], row["duplicate"]))

    threads = [threading.Thread(target=session, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    new = Counter(key for key, _, duplicate in answers if not duplicate)
    assert set(new.values()) == {1}
    ids: dict[object, set[int]] = {}
    for key, event_id, _ in answers:
        ids.setdefault(key, set()).add(event_id)
    assert {len(found) for found in ids.values()} == {1}
    total = db.execute(
        "SELECT count(*)::int AS n, sum(duplicate_count)::int AS d FROM events"
    ).fetchone()
    assert total is not None
    assert total["n"] + total["d"] == len(answers)
