"""``record_dead_letters`` on a real Postgres: each new dead letter has an alert of its own up to
the window's limit, the rest are held and go out in one digest a window, nothing is dropped, and
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


def test_alerts_25_dead_letters_at_once_are_ten_alerts_and_one_digest_of_15(
    db: psycopg.Connection[Any],
) -> None:
    keys = _record(db, _letters(1, 25), T0)
    assert keys[:LIMIT] == [dead_letter_key([f"event:{n}"], T0) for n in range(1, 11)]
    digest = dead_letter_digest_key([f"event:{n}" for n in range(11, 26)], T0)
    assert keys[LIMIT:] == [digest] == ["alert:dead:digest:event:11+14@20260302T090000"]
    assert [row.subject for row in store.rows_of(db, digest)] == [
        f"event:{n}" for n in range(11, 26)
    ]
    assert all(row["action_key"] is not None for row in _rows(db))
    # A retry of the same tick (or a second look at the same moment) makes no second digest.
    assert _record(db, _letters(1, 25), T0) == []
    assert len({row["action_key"] for row in _rows(db)}) == LIMIT + 1


def test_alerts_dead_letters_past_the_limit_wait_for_the_next_digest_and_none_is_lost(
    db: psycopg.Connection[Any],
) -> None:
    assert len(_record(db, _letters(1, 25), T0)) == LIMIT + 1
    # Within the window: the limit is used up and a digest went out, so later ones are held.
    assert _record(db, _letters(26, 5, T0 + timedelta(hours=1)), T0 + timedelta(hours=1)) == []
    assert _record(db, _letters(31, 2, T0 + timedelta(hours=3)), T0 + timedelta(hours=3)) == []
    assert _record(db, [], T0 + WINDOW) == []  # the window's last moment is still within it
    held = [row["subject"] for row in _rows(db) if row["action_key"] is None]
    assert held == [f"event:{n}" for n in range(26, 33)]
    listed = {row.subject: row for row in store.listed(db, days=None)}
    assert listed["event:26"].counted_in is None

    # Once the window since the last digest passed, the next tick puts all held in one digest,
    # and a new dead letter of that tick has an alert of its own again (the ten went out then).
    later = T0 + WINDOW + timedelta(minutes=1)
    keys = _record(db, _letters(40, 1, later), later)
    assert keys == [
        dead_letter_key(["event:40"], later),
        dead_letter_digest_key([f"event:{n}" for n in range(26, 33)], later),
    ]
    assert [row.subject for row in store.rows_of(db, keys[1])] == held
    assert all(row["action_key"] is not None for row in _rows(db))  # nothing lost

    # The next 9 fill the new window's limit; the 10th after them waits for the next digest.
    soon = later + timedelta(minutes=5)
    assert len(_record(db, _letters(41, 10, soon), soon)) == LIMIT - 1
    assert [row["subject"] for row in _rows(db) if row["action_key"] is None] == ["event:50"]
    again = later + WINDOW + timedelta(seconds=1)
    (last,) = _record(db, [], again)
    assert last == dead_letter_digest_key(["event:50"], again)
    keys_of_all = [row["action_key"] for row in _rows(db)]
    assert None not in keys_of_all
    assert sum(is_dead_letter_digest(k) for k in set(keys_of_all)) == 3


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
    assert then == [dead_letter_digest_key([f"event:{n}" for n in range(11, 21)], T0)]
    assert len({row["action_key"] for row in _rows(db)}) == LIMIT + 1
