"""An error of the database itself stops the event worker's run without charging the event, on a
real Postgres whose server raises each error (``engine/run_stops.py``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import dagster as dg
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.defs import register
from followup_pipeline.engine.run_stops import RunStopped
from followup_pipeline.engine.worker import EventWorker, ItemFailed
from followup_pipeline.integrations.resources import EspoCrmResource
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings, load_settings
from followup_pipeline.store.db import connection_kwargs
from followup_pipeline.store.events import Event, store_delivery

Conn = psycopg.Connection[Any]
#: What a handling meets: run on the worker's connection, with another session of the test's.
Fault = Callable[[Conn, Conn], None]


def _raise(errcode: str) -> Fault:
    """A PL/pgSQL ``RAISE`` of ``errcode``: for errors a test cannot cheaply cause for real."""

    statement = sql.SQL("DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = {}; END $$")

    def fault(conn: Conn, other: Conn) -> None:
        with conn.transaction():
            conn.execute(statement.format(sql.Literal(errcode)))

    return fault


def _statement_timeout(conn: Conn, other: Conn) -> None:
    with conn.transaction():
        conn.execute("SET LOCAL statement_timeout = '20ms'")
        conn.execute("SELECT pg_sleep(5)")


def _lock_timeout(conn: Conn, other: Conn) -> None:
    with other.transaction():  # another session holds the row
        other.execute("SELECT * FROM probe WHERE id = 1 FOR UPDATE")
        with conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '20ms'")
            conn.execute("SELECT * FROM probe WHERE id = 1 FOR UPDATE")


def _admin_shutdown(conn: Conn, other: Conn) -> None:
    # The second argument waits (up to 5 s) until the worker's backend is gone.
    other.execute("SELECT pg_terminate_backend(%s, 5000)", (conn.info.backend_pid,))
    with conn.transaction():
        conn.execute("SELECT 1")


def _read_only(conn: Conn, other: Conn) -> None:
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")  # as on a standby after a fail-over
        conn.execute("UPDATE probe SET n = n + 1")


def _serialization_failure(conn: Conn, other: Conn) -> None:
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT n FROM probe WHERE id = 1")  # the snapshot is taken
        other.execute("UPDATE probe SET n = n + 1 WHERE id = 1")  # another run commits
        conn.execute("UPDATE probe SET n = n + 1 WHERE id = 1")


def _statement(text: bytes) -> Fault:
    def fault(conn: Conn, other: Conn) -> None:
        with conn.transaction():
            conn.execute(text)

    return fault


def _item_failed(conn: Conn, other: Conn) -> None:
    raise ItemFailed("0:probe", "the vendor answered 503")


FAULTS: dict[str, Fault] = {
    "statement_timeout": _statement_timeout,
    "lock_timeout": _lock_timeout,
    "admin_shutdown": _admin_shutdown,
    "crash_shutdown": _raise("crash_shutdown"),
    "disk_full": _raise("disk_full"),
    "out_of_memory": _raise("out_of_memory"),
    "read_only": _read_only,
    "io_error": _raise("io_error"),
    "data_corrupted": _raise("data_corrupted"),
    "serialization_failure": _serialization_failure,
    "deadlock_detected": _raise("deadlock_detected"),
    "division_by_zero": _statement(b"SELECT 1 / 0"),
    "unique_violation": _statement(b"INSERT INTO probe (id) VALUES (1)"),
    "undefined_table": _statement(b"SELECT * FROM no_such_table"),
    "raise_exception": _statement(b"DO $$ BEGIN RAISE EXCEPTION 'no'; END $$"),
    "item_failed": _item_failed,
}


class Faulty:
    """A test's handler: an event whose body names a fault meets it in its first ``times``
    handlings (every one by default); any other event is done."""

    def __init__(self, conn: Conn, other: Conn, times: int = 99) -> None:
        self.conn, self.other, self.times = conn, other, times
        self.counts: Counter[str] = Counter()
        self.handled: Counter[int] = Counter()

    def handle(self, event: Event, done: set[str]) -> bool:
        """Meet the event's fault, or do nothing: the worker marks it done."""
        self.handled[event.id] += 1
        fault = FAULTS.get(bytes(event.body).decode())
        if fault is not None and self.handled[event.id] <= self.times:
            fault(self.conn, self.other)
        return False


@pytest.fixture
def settings() -> Settings:
    """Failed events are due again at once."""
    return load_settings(event_backoff_base_s=0)


@pytest.fixture
def conn(db: Conn, db_url: str) -> Iterator[Conn]:
    """The worker's connection, as the pool hands it out (not autocommit), and a probe row."""
    db.execute("CREATE TABLE probe (id integer PRIMARY KEY, n integer NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO probe (id) VALUES (1)")
    with psycopg.connect(db_url, **connection_kwargs()) as worker_conn:
        yield worker_conn


def _add(db: Conn, body: str) -> int:
    stored = store_delivery(db, source="espocrm", event_type=None, body=body.encode(), headers={})
    return stored.event_id


def _event(db: Conn, event_id: int) -> dict[str, Any]:
    row = db.execute(
        "SELECT *, claimed_until > now() AS leased FROM events WHERE id = %s", (event_id,)
    ).fetchone()
    assert row is not None
    return dict(row)


def _worker(conn: Conn, db: Conn, settings: Settings, times: int = 99) -> EventWorker:
    return EventWorker(conn, Faulty(conn, db, times), settings, sources=("espocrm",))


def _faulty(worker: EventWorker) -> Faulty:
    assert isinstance(worker.handler, Faulty)
    return worker.handler


STOPS = [
    ("statement_timeout", "57014 QueryCanceled"),
    ("lock_timeout", "55P03 LockNotAvailable"),
    ("admin_shutdown", "57P01 AdminShutdown"),
    ("crash_shutdown", "57P02 CrashShutdown"),
    ("disk_full", "53100 DiskFull"),
    ("out_of_memory", "53200 OutOfMemory"),
    ("read_only", "25006 ReadOnlySqlTransaction"),
    ("io_error", "58030 IoError"),
    ("data_corrupted", "XX001 DataCorrupted"),
    ("serialization_failure", "40001 SerializationFailure"),
    ("deadlock_detected", "40P01 DeadlockDetected"),
]


@pytest.mark.parametrize(("fault", "named"), STOPS, ids=[fault for fault, _ in STOPS])
def test_run_stops_a_database_error_ends_the_run_and_charges_nothing(
    db: Conn, db_url: str, conn: Conn, settings: Settings, fault: str, named: str
) -> None:
    stopping, behind = _add(db, fault), _add(db, "fine")
    with pytest.raises(RunStopped) as stopped:
        _worker(conn, db, settings).run()
    assert str(stopped.value).startswith(f"event:{stopping} stopped the run: {named}: ")
    row = _event(db, stopping)
    assert (row["status"], row["attempts"], row["run_stops"]) == ("pending", 0, 1)
    assert (row["dead_step"], row["last_error"].startswith(named)) == ("run_stop", True)
    assert row["leased"]  # it waits out its lease
    untouched = _event(db, behind)
    assert (untouched["status"], untouched["attempts"], untouched["leased"]) == ("pending", 0, None)
    # The next run (on a connection of its own: the first may be gone) takes the event behind.
    with psycopg.connect(db_url, **connection_kwargs()) as again:
        counts = _worker(again, db, settings).run()
    assert (counts["events_claimed"], counts["events_done"]) == (1, 1)
    assert _event(db, behind)["status"] == "done"
    assert _event(db, stopping)["attempts"] == 0


def test_run_stops_an_event_that_stops_n_runs_in_a_row_is_a_dead_letter_naming_the_error(
    db: Conn, conn: Conn, settings: Settings
) -> None:
    poison = _add(db, "statement_timeout")
    worker = _worker(conn, db, settings)
    assert settings.event_run_stops_max == 3
    for stops in range(1, 4):
        assert _event(db, poison)["status"] == "pending"
        with pytest.raises(RunStopped) as stopped:
            worker.run()
        assert _event(db, poison)["run_stops"] == stops
        db.execute("UPDATE events SET claimed_until = NULL")  # its lease ran out
    assert str(stopped.value).endswith("a dead letter now, after 3 runs it stopped in a row")
    row = _event(db, poison)
    assert (row["status"], row["attempts"], row["dead_step"]) == ("dead", 0, "run_stop")
    assert row["last_error"] == (
        "stopped 3 runs in a row, the last with 57014 QueryCanceled: "
        "canceling statement due to statement timeout"
    )
    assert _worker(conn, db, settings).run()["events_claimed"] == 0  # no run meets it again


def test_run_stops_are_counted_in_a_row_only(db: Conn, conn: Conn) -> None:
    settings = load_settings(event_backoff_base_s=0, event_run_stops_max=2)
    event = _add(db, "statement_timeout")
    worker = _worker(conn, db, settings)
    with pytest.raises(RunStopped):
        worker.run()
    # The lease ran out, and this time the handling fails for the event's own reason.
    db.execute("UPDATE events SET claimed_until = NULL, body = 'division_by_zero'")
    assert worker.run()["events_retried"] == 1
    assert (_event(db, event)["attempts"], _event(db, event)["run_stops"]) == (1, 0)
    db.execute("UPDATE events SET body = 'statement_timeout'")
    with pytest.raises(RunStopped):
        worker.run()
    row = _event(db, event)
    assert (row["status"], row["attempts"], row["run_stops"]) == ("pending", 1, 1)


OWN = [
    ("division_by_zero", "event", "DivisionByZero"),
    ("unique_violation", "event", "UniqueViolation"),
    ("undefined_table", "event", "UndefinedTable"),
    ("raise_exception", "event", "RaiseException"),
    ("item_failed", "0:probe", "the vendor answered 503"),
]


@pytest.mark.parametrize(("fault", "step", "error"), OWN, ids=[fault for fault, *_ in OWN])
def test_run_stops_an_events_own_error_uses_its_own_attempts(
    db: Conn, conn: Conn, settings: Settings, fault: str, step: str, error: str
) -> None:
    failing, behind = _add(db, fault), _add(db, "fine")
    counts = _worker(conn, db, settings).run()
    assert (counts["events_retried"], counts["events_done"]) == (1, 1)
    row = _event(db, failing)
    assert (row["status"], row["attempts"], row["run_stops"]) == ("pending", 1, 0)
    assert (row["dead_step"], error in row["last_error"]) == (step, True)
    assert _event(db, behind)["status"] == "done"


@pytest.mark.parametrize("fault", ["serialization_failure", "deadlock_detected"])
def test_run_stops_a_conflict_is_retried_once_in_place(
    db: Conn, conn: Conn, settings: Settings, fault: str
) -> None:
    event = _add(db, fault)
    worker = _worker(conn, db, settings, times=1)
    counts = worker.run()
    assert (counts["events_conflict_retried"], counts["events_done"]) == (1, 1)
    assert _faulty(worker).handled[event] == 2
    row = _event(db, event)
    assert (row["status"], row["attempts"], row["run_stops"]) == ("done", 1, 0)


def test_run_stops_the_conflict_that_comes_again_names_the_retry(
    db: Conn, conn: Conn, settings: Settings
) -> None:
    _add(db, "deadlock_detected")
    with pytest.raises(RunStopped, match=r"raised \(again, after one retry\); its attempt"):
        _worker(conn, db, settings, times=2).run()


def _alter_database(admin_url: str, db_url: str, change: sql.Composable) -> None:
    """Change the test's database, from a session of another (some changes refuse their own)."""
    name = conninfo_to_dict(db_url)["dbname"]
    assert isinstance(name, str)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} {}").format(sql.Identifier(name), change))


def test_run_stops_a_stop_that_cannot_be_recorded_leaves_the_attempt_charged(
    db: Conn, db_url: str, pg_admin_url: str, conn: Conn, settings: Settings
) -> None:
    event = _add(db, "admin_shutdown")
    # The worker's connection is killed, and no new one is let in to give the attempt back.
    _alter_database(pg_admin_url, db_url, sql.SQL("WITH ALLOW_CONNECTIONS false"))
    try:
        with pytest.raises(RunStopped, match="its attempt stays charged, its lease runs out"):
            _worker(conn, db, settings).run()
    finally:
        _alter_database(pg_admin_url, db_url, sql.SQL("WITH ALLOW_CONNECTIONS true"))
    row = _event(db, event)
    assert (row["status"], row["attempts"], row["run_stops"], row["leased"]) == (
        "pending",
        1,
        0,
        True,
    )


def test_run_stops_a_lock_timeout_in_register_fails_its_dagster_run(
    db: Conn, db_url: str, pg_admin_url: str
) -> None:
    _alter_database(pg_admin_url, db_url, sql.SQL("SET lock_timeout = '100ms'"))
    body = b'[{"id":"d1","name":"Offer","stage":"Proposal"}]'
    event = store_delivery(
        db, source="espocrm", event_type="Opportunity.create", body=body, headers={}
    ).event_id
    resources = {
        "settings": load_settings(event_backoff_base_s=0),
        "postgres": PostgresResource(url=db_url),
        "espocrm": EspoCrmResource(base_url="http://127.0.0.1:9/espocrm", api_key="k"),
    }
    db.execute(
        "INSERT INTO deal_marks (subject_id, last_event_id, last_received_at)"
        " VALUES ('d1', %s, now() - interval '1 day')",
        (event,),
    )
    # Another register run holds the deal's mark: this run's waits for it, then times out.
    with db.transaction():
        db.execute("SELECT * FROM deal_marks WHERE subject_id = 'd1' FOR UPDATE")
        with dg.instance_for_test() as instance:
            result = register.register.execute_in_process(
                instance=instance, resources=resources, raise_on_error=False
            )
    assert not result.success
    failure = result.failure_data_for_node("register_events")
    assert failure is not None
    assert failure.error is not None
    assert f"event:{event} stopped the run: 55P03 LockNotAvailable" in failure.error.to_string()
    row = _event(db, event)
    assert (row["status"], row["attempts"], row["run_stops"]) == ("pending", 0, 1)
