"""``store_delivery``: a Standard Webhooks delivery id is recognised whenever its retry comes, and
two deliveries of one id at once end in one event, decided by the unique index."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from followup_pipeline.store.db import connection_kwargs
from followup_pipeline.store.events import (
    DELIVERY_ID_MAX,
    DELIVERY_ID_RETENTION,
    Stored,
    delivery_key,
    event_by_id,
    store_delivery,
)

FORM = json.dumps({"type": "form.submitted", "data": {"email": "a@example.com"}}).encode()


def _store(conn: psycopg.Connection[Any], delivery_id: str | None, body: bytes = FORM) -> Stored:
    return store_delivery(
        conn,
        source="forms",
        event_type="form.submitted",
        body=body,
        headers={},
        status="unhandled",
        delivery_id=delivery_id,
    )


def _blocked(db: psycopg.Connection[Any], pid: int) -> bool:
    row = db.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,))
    found = row.fetchone()
    return found is not None and found["wait_event_type"] == "Lock"


@pytest.mark.parametrize("first_commits", [True, False], ids=["commit", "rollback"])
def test_events_a_delivery_id_in_flight_is_waited_for_not_read_around(
    db: psycopg.Connection[Any], db_url: str, first_commits: bool
) -> None:
    kwargs = connection_kwargs()
    # The pool is left last: should the test fail while the second delivery waits, the first
    # connection's end releases it first.
    with (
        ThreadPoolExecutor(1) as pool,
        psycopg.connect(db_url, autocommit=True, **kwargs) as second,
        psycopg.connect(db_url, **kwargs) as first,
    ):
        stored = _store(first, "msg_1")  # inserted, not committed: invisible to the second
        waiting = pool.submit(_store, second, "msg_1")
        deadline = time.monotonic() + 10
        while not _blocked(db, second.info.backend_pid):
            assert time.monotonic() < deadline, "the second delivery never waited"
            assert not waiting.done(), waiting.result()
            time.sleep(0.02)
        if first_commits:
            first.commit()
        else:
            first.rollback()
        then = waiting.result(timeout=10)
    if first_commits:
        assert (then.event_id, then.duplicate) == (stored.event_id, True)
    else:
        assert then.duplicate is False
    rows = db.execute("SELECT id, duplicate_count FROM events").fetchall()
    assert rows == [{"id": then.event_id, "duplicate_count": 1 if first_commits else 0}]


def test_events_a_delivery_id_is_a_duplicate_whenever_it_comes_back(
    db: psycopg.Connection[Any],
) -> None:
    stored = _store(db, "msg_1")
    past = DELIVERY_ID_RETENTION + timedelta(days=1)
    db.execute("UPDATE events SET received_at = received_at - %s", (past,))
    again = _store(db, "msg_1", body=FORM + b" ")  # whatever the body: the id is the message
    assert (again.event_id, again.duplicate) == (stored.event_id, True)
    # Other ids are other messages, the same body or not; without an id the body-hash rule
    # recognises the same body within the window, as for EspoCRM.
    assert not _store(db, "msg_2").duplicate
    other = b'{"type": "form.submitted"}'
    assert not _store(db, None, body=other).duplicate
    assert _store(db, None, body=other).duplicate
    event = event_by_id(db, stored.event_id)
    assert event is not None
    assert (event.delivery_id, event.duplicate_count) == ("msg_1", 1)


def test_events_a_long_delivery_id_is_kept_as_its_hash(db: psycopg.Connection[Any]) -> None:
    short = "msg_" + "x" * (DELIVERY_ID_MAX - 4)
    assert delivery_key(short) == short
    long_id = "msg_" + "x" * 20_000  # too long for an index entry as it is
    key = delivery_key(long_id)
    assert key.startswith("sha256:")
    assert len(key) == len("sha256:") + 64
    assert delivery_key("msg_\udc80") != "msg_\udc80"  # Postgres text holds no lone surrogate
    stored = _store(db, long_id)
    assert _store(db, long_id) == Stored(stored.event_id, "unhandled", duplicate=True)
    row = db.execute("SELECT delivery_id FROM events").fetchone()
    assert row == {"delivery_id": key}
