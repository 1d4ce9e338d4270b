"""``store_deliveries`` (migration 0033), the group commit's set-based store, answers what storing
the same deliveries one by one through ``store_delivery`` answers, and leaves the same rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from followup_pipeline.ingress.batcher import batch_params
from followup_pipeline.store import events
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
        False, True, True, False, False, True, False, True, True, True
    ]  # fmt: skip
    assert sum(row[4] for row in rows) == 6  # every duplicate answered is counted on its event
