"""Errors of the database itself, which stop an event worker's run without charging the event.

A run's state is unclear after an error that says the database cannot be trusted or cannot
serve now (docs/architecture.md §3, "Failures"): the run stops, raising ``RunStopped``, so that
Dagster fails it and the run-failure sensor alerts. Which errors, by SQLSTATE class:

- ``08`` connection exception, and a link the client lost (no SQLSTATE): the database is gone.
- ``57`` operator intervention: ``57014`` a statement timeout or a cancel, ``57P01`` an
  administrator's shutdown (``pg_terminate_backend``), ``57P02`` a crash shutdown, ``57P03``
  cannot connect now, ``57P04`` database dropped, ``57P05`` idle session timeout.
- ``55`` object not in prerequisite state: ``55P03`` a lock timeout (``lock_not_available``).
- ``53`` insufficient resources: a full disk, out of memory, too many connections.
- ``58`` system error (I/O), ``XX`` internal error (corrupted data or index), ``F0``
  configuration file error, ``72`` snapshot too old.
- ``25`` invalid transaction state: a read-only transaction (a standby after a fail-over), a
  transaction left failed.
- ``40`` transaction rollback: ``40001`` a serialization failure and ``40P01`` a deadlock are
  first retried once, in place (two ``register`` runs work side by side); the second time, and
  any other of ``40`` (``40003`` statement completion unknown) at once, stop the run.

Every other error is the event's own and uses one of its attempts: an ``ItemFailed``, a vendor's
error, a body that cannot be read, and a statement the database answered and refused for what it
carries or asks: ``22`` data exception, ``23`` integrity constraint, ``42`` syntax or access
rule, ``54`` program limit (an index row too large), ``P0`` an exception raised in PL/pgSQL.

The event that met the error is not charged: the attempt charged when its work started is given
back and the stop counted, on the worker's connection or, when that is gone, on a new one; if
even that write fails (the database is down), the attempt stays charged, as for a worker that
died. The event keeps its lease (``FOLLOWUP_EVENT_LEASE_S``): the runs launched next take the
events behind it, freed at once, and it comes back when the lease runs out, which gives a
database condition time to clear. An event that stops ``FOLLOWUP_EVENT_RUN_STOPS_MAX`` runs in a
row (no handling of it ended otherwise in between) becomes a dead letter at step ``run_stop``
naming the error, so a poison event cannot stop every run for good.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import psycopg
from psycopg import pq

from followup_pipeline.store import event_stops
from followup_pipeline.store.db import StoreError, connect, lost_connection, storable

#: SQLSTATE classes of an error of the database itself: the run stops.
STOP_CLASSES = ("08", "25", "40", "53", "55", "57", "58", "72", "F0", "XX")
#: A serialization failure and a deadlock: a conflict with another transaction, retried once.
CONFLICT_STATES = ("40001", "40P01")
#: The dead letter's step of an event that stopped too many runs in a row.
STEP = "run_stop"

Fault = Literal["conflict", "stop"]


class RunStopped(StoreError):
    """An error of the database itself met while handling an event: the run stops, and the
    event is not charged for it."""


def database_fault(
    error: BaseException, conn: psycopg.Connection[Any] | None = None
) -> Fault | None:
    """``stop`` for an error of the database itself, ``conflict`` for a serialization failure
    or a deadlock (retried once before it stops the run), None for an error of the event's own."""
    if isinstance(error, StoreError) and isinstance(error.__cause__, psycopg.Error):
        error = error.__cause__
    if lost_connection(error, conn):
        return "stop"
    state = error.sqlstate if isinstance(error, psycopg.Error) else None
    if state is None:
        return None
    if state in CONFLICT_STATES:
        return "conflict"
    return "stop" if state[:2] in STOP_CLASSES else None


def error_name(error: BaseException) -> str:
    """An error as a run's failure and a dead letter name it: its SQLSTATE, its class and the
    first line of its message (``57014 QueryCanceled: canceling statement due to …``)."""
    state = getattr(error, "sqlstate", None)
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}"
    return storable(f"{state} {text}" if state else text, 500)


def record_stop(
    conn: psycopg.Connection[Any],
    *,
    event_id: int,
    run: str,
    error: str,
    stops_max: int,
    behind: Sequence[int],
) -> str:
    """Give back the attempt of the event whose handling met ``error``, count the stop (at the
    ``stops_max``-th in a row, a dead letter) and free ``behind``, the events of the batch not
    started; what became of the event, in words for the run's failure."""
    try:
        with _writable(conn) as writer, writer.transaction():
            stops = event_stops.give_back(
                writer, event_id=event_id, run=run, step=STEP, error=error
            )
            if stops is not None and stops >= stops_max:
                last = storable(f"stopped {stops} runs in a row, the last with {error}")
                event_stops.bury(writer, event_id=event_id, step=STEP, error=last)
            event_stops.release(writer, behind, run=run)
    except (psycopg.Error, StoreError) as failed:
        return (
            f"its attempt stays charged, its lease runs out: the stop could not be recorded "
            f"({error_name(failed)})"
        )
    if stops is None:
        return "it was no longer this run's claim: nothing given back"
    if stops >= stops_max:
        return f"a dead letter now, after {stops} runs it stopped in a row"
    return (
        f"its attempt is given back, its lease kept (run {stops} of {stops_max} it stopped in "
        "a row)"
    )


@contextlib.contextmanager
def _writable(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """``conn`` with no transaction open, or a new connection to its database when it is gone."""
    if conn.closed or conn.broken:
        with connect(conn.info.dsn, password=conn.info.password or None) as fresh:
            yield fresh
        return
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        conn.rollback()  # what the failed handling left open is rolled back anyway
    yield conn
