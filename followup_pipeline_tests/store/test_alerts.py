"""``record_dead_letters`` on a real Postgres: each new dead letter has an alert of its own up to
the window's limit, the rest are held and go out in one digest an hour, nothing is dropped, and
two ticks at once share the limit under one lock."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from followup_pipeline.domain.alerts import (
    dead_letter_digest_key,
    dead_letter_key,
    is_dead_letter_digest,
)
from followup_pipeline.store import alerts as store
from followup_pipeline.store.db import connection_kwargs

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
WINDOW = timedelta(hours=6)
HOUR = timedelta(hours=1)
LIMIT = 10


def _letters(first: int, count: int, died: datetime = T0) -> list[store.Signal]:
    """Dead letters ``event:first`` … as ``dead_letter_signals`` makes them."""
    return [
        store.Signal(
            kind="dead_letter",
            source=f"event:{n}|register|{died.isoformat()}",
            fingerprint=f"dead:event:{n}",
            subject=f"event:{n}",
            message="espocrm Opportunity.update at step register, 5 attempts: HTTP 503",
            occurred_at=died,
        )
        for n in range(first, first + count)
    ]


def _record(
    conn: psycopg.Connection[Any], letters: Sequence[store.Signal], at: datetime
) -> list[str]:
    return store.record_dead_letters(conn, letters, at=at, limit=LIMIT, window=WINDOW)


def _rows(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return db.execute("SELECT id, subject, action_key FROM alerts ORDER BY id").fetchall()


def test_alerts_three_dead_letters_are_three_alerts(db: psycopg.Connection[Any]) -> None:
    keys = _record(db, _letters(1, 3), T0)
    assert keys == [dead_letter_key([f"event:{n}"], T0) for n in (1, 2, 3)]
    assert keys[0] == "alert:dead:event:1@20260302T090000"
    for n, key in enumerate(keys, start=1):
        assert [row.subject for row in store.rows_of(db, key)] == [f"event:{n}"]
    assert _record(db, _letters(1, 3), T0) == []  # the same tick again: nothing new


def test_alerts_25_dead_letters_at_once_are_ten_alerts_then_one_digest_of_15_an_hour_later(
    db: psycopg.Connection[Any],
) -> None:
    keys = _record(db, _letters(1, 25), T0)
    assert keys == [dead_letter_key([f"event:{n}"], T0) for n in range(1, 11)]
    # The 15 past the limit wait an hour, so that their digest counts what follows them.
    assert _record(db, [], T0 + HOUR - timedelta(seconds=1)) == []
    (digest,) = _record(db, [], T0 + HOUR)
    assert digest == dead_letter_digest_key([f"event:{n}" for n in range(11, 26)], T0 + HOUR)
    assert digest == "alert:dead:digest:event:11+14@20260302T100000"
    assert [row.subject for row in store.rows_of(db, digest)] == [
        f"event:{n}" for n in range(11, 26)
    ]
    assert all(row["action_key"] is not None for row in _rows(db))
    # A retry of the same tick (or a second look at the same moment) makes no second digest.
    assert _record(db, _letters(1, 25), T0 + HOUR) == []
    assert len({row["action_key"] for row in _rows(db)}) == LIMIT + 1


def test_alerts_an_outage_that_kills_one_a_minute_is_ten_mails_and_a_digest_an_hour(
    db: psycopg.Connection[Any],
) -> None:
    """Deaths spread out (retries with jitter): ten alerts of their own, then one digest an
    hour that counts that hour's, and none is lost."""
    keys: list[str] = []
    for minute in range(180):
        at = T0 + timedelta(minutes=minute)
        keys += _record(db, _letters(minute + 1, 1, at), at)
    at = T0 + timedelta(hours=4)
    keys += _record(db, [], at)  # the last hour's held ones, after the deaths stopped
    digests = [k for k in keys if is_dead_letter_digest(k)]
    assert len(keys) - len(digests) == LIMIT
    # An hour after the last mail: 10:09 (the tenth single went at 09:09), 11:09, 13:00.
    assert len(digests) == 3
    counted = [len(store.rows_of(db, k)) for k in digests]
    assert counted == [60, 60, 50]  # 09:10-10:09, 10:10-11:09, 11:10-11:59
    assert sum(counted) == 180 - LIMIT
    assert all(row["action_key"] is not None for row in _rows(db))  # nothing lost
    # After the window, a new dead letter has an alert of its own again.
    later = T0 + WINDOW + timedelta(hours=1)
    assert _record(db, _letters(500, 1, later), later) == [dead_letter_key(["event:500"], later)]


def test_alerts_dead_letters_known_before_alerting_have_no_alert(
    db: psycopg.Connection[Any],
) -> None:
    keys = store.record_dead_letters(
        db, _letters(1, 25), at=T0, limit=LIMIT, window=WINDOW, known=True
    )
    assert keys == []
    rows = db.execute("SELECT action_key, counted_in FROM alerts").fetchall()
    assert rows == [{"action_key": None, "counted_in": "known before alerting"}] * 25
    assert _record(db, [], T0 + 2 * WINDOW) == []  # on the record, never in a digest
    # They used none of the limit: the next ten have alerts of their own.
    assert len(_record(db, _letters(26, 10), T0)) == LIMIT


def _blocked(db: psycopg.Connection[Any], pid: int) -> bool:
    row = db.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,))
    found = row.fetchone()
    return found is not None and found["wait_event_type"] == "Lock"


def test_alerts_two_ticks_at_once_share_the_limit(db: psycopg.Connection[Any], db_url: str) -> None:
    kwargs = connection_kwargs()
    with (
        ThreadPoolExecutor(1) as pool,
        psycopg.connect(db_url, autocommit=True, **kwargs) as second,
        psycopg.connect(db_url, **kwargs) as first,
    ):
        first.execute("SELECT 1")  # a transaction is open: the call's lock lasts until commit
        assert len(_record(first, _letters(1, 10), T0)) == LIMIT  # not committed yet
        waiting = pool.submit(_record, second, _letters(11, 10), T0)
        deadline = time.monotonic() + 10
        while not _blocked(db, second.info.backend_pid):
            assert time.monotonic() < deadline, "the second tick never waited for the first"
            assert not waiting.done(), waiting.result()
            time.sleep(0.02)
        first.commit()
        then = waiting.result(timeout=10)
    # The second saw the first's ten alerts: its ten are held, and go out in one digest.
    assert then == []
    assert _record(db, [], T0 + HOUR) == [
        dead_letter_digest_key([f"event:{n}" for n in range(11, 21)], T0 + HOUR)
    ]
    assert len({row["action_key"] for row in _rows(db)}) == LIMIT + 1
