"""``KeyLocks``: a run's locks by name on one connection, excluding ``RunLock``'s of the same
name, each let go on its own, all of them when the connection closes."""

from __future__ import annotations

from followup_pipeline.store.run_lock import KeyLocks, RunLock


def test_key_locks_take_many_names_on_one_connection_and_let_each_go(db_url: str) -> None:
    locks = KeyLocks(db_url, owner="test-run")
    try:
        assert locks.take("reminder:a")
        assert locks.take("reminder:b")
        session = locks.conn
        other = RunLock.try_take(db_url, "reminder:a", owner="another run")
        assert not other.held
        assert "followup-lock test-run" in other.holder
        other.release()
        locks.release("reminder:a")
        assert locks.conn is session  # one connection for every name
        again = RunLock.try_take(db_url, "reminder:a", owner="another run")
        assert again.held
        assert not locks.take("reminder:a")  # held by the other now
        again.release()
        held_b = RunLock.try_take(db_url, "reminder:b", owner="another run")
        assert not held_b.held  # b is still the run's
        held_b.release()
    finally:
        locks.close()
    freed = RunLock.try_take(db_url, "reminder:b", owner="another run")
    assert freed.held  # closing let go of what was left
    freed.release()
