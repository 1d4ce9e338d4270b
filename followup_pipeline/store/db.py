"""Connections to the machine's Postgres: the pool, the URL, and our own error type.

Errors: any psycopg error that reaches a run is a ``StoreError`` — the state is unclear, so the
run aborts (docs/architecture.md §1). ``StoreUnavailable`` is the subset where the server cannot be
reached at all (the ingress answers 503 on it).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, LiteralString, TypedDict, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import BaseRowFactory, RowFactory, RowMaker, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from followup_pipeline.settings import ConfigError, Settings
from followup_pipeline.store.embedded import EmbeddedCluster

SCHEMA = "followup"
CONNECT_TIMEOUT_S = 5
POOL_TIMEOUT_S = 10
#: psycopg_pool's own default: five minutes of background reconnection.
RECONNECT_TIMEOUT_S = 300.0


T = TypeVar("T")
#: Named query parameters (``%(name)s``).
Params = Mapping[str, object] | None


#: SQLSTATEs of a connection that is gone (class 08) or a server going away (57P01-57P03).
LOST_CONNECTION_STATES = ("08", "57P")


def lost_connection(error: BaseException, conn: psycopg.Connection[Any] | None = None) -> bool:
    """Whether ``error`` means the database is gone (the state is unclear: abort the run), as
    opposed to a failure of one statement (a value it refused, a row too large), which is the
    failure of the item that sent it."""
    if isinstance(error, StoreUnavailable) or (conn is not None and conn.broken):
        return True
    if isinstance(error, psycopg.Error):
        state = error.sqlstate
        if state is None:  # raised by the client: a lost link, or a value it cannot send
            return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)
        return state.startswith(LOST_CONNECTION_STATES)
    return False


def storable(text: str, limit: int = 2000) -> str:
    """``text`` as Postgres can keep it: no NUL, lone surrogates replaced (U+FFFD), at most
    ``limit`` characters. For what is written about input we do not control (errors, types)."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def typed_row(cls: type[T]) -> BaseRowFactory[T]:
    """Rows as the frozen dataclass ``cls``: its fields are taken from the columns by name.

    Like psycopg's ``class_row``, except that a column the dataclass does not name is left out,
    so a migration that adds a column does not break the code that was running before it; a
    field that no column fills fails loudly.
    """
    fields = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]

    def factory(cursor: Any) -> RowMaker[T]:
        columns = [column.name for column in cursor.description or ()]
        keep = [(index, name) for index, name in enumerate(columns) if name in fields]

        def make(values: Sequence[Any]) -> T:
            return cls(**{name: values[index] for index, name in keep})

        return make

    return factory


def fetch_one(
    conn: psycopg.Connection[Any], cls: type[T], sql: LiteralString, params: Params = None
) -> T | None:
    """The first row of ``sql`` as a ``cls`` (``typed_row``), or None."""
    with conn.cursor(row_factory=typed_row(cls)) as cur:
        return cur.execute(sql, params).fetchone()


def fetch_all(
    conn: psycopg.Connection[Any], cls: type[T], sql: LiteralString, params: Params = None
) -> list[T]:
    """Every row of ``sql`` as a ``cls`` (``typed_row``)."""
    with conn.cursor(row_factory=typed_row(cls)) as cur:
        return cur.execute(sql, params).fetchall()


class StoreError(RuntimeError):
    """The database failed; the caller must not carry on as if the write happened."""


class StoreUnavailable(StoreError):
    """The database cannot be reached."""


class ConnectionOptions(TypedDict):
    """Options for every connection (psycopg's keyword arguments)."""

    row_factory: RowFactory[Any]
    options: str
    connect_timeout: int


def connection_kwargs() -> ConnectionOptions:
    """Options for every connection: our schema first, a bounded connect; dict rows for the
    statements that return no typed row (counts, ids)."""
    return {
        "row_factory": dict_row,
        "options": f"-c search_path={SCHEMA},public",
        "connect_timeout": CONNECT_TIMEOUT_S,
    }


def build_pool(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 4,
    name: str = "followup",
    timeout: float = POOL_TIMEOUT_S,
    reconnect_timeout: float = RECONNECT_TIMEOUT_S,
) -> ConnectionPool[Any]:
    """A checked pool of connections to ``url`` with the machine's connection options, not yet
    open: the caller chooses how to open it (and closes it).

    ``reconnect_timeout`` bounds how long the pool keeps retrying a lost connection in the
    background, with a backoff that doubles (1, 2, 4, 8 s …); after it, the next request that
    needs a connection makes one at once.
    """
    return ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        open=False,
        check=ConnectionPool.check_connection,
        kwargs=dict(connection_kwargs()),
        name=name,
        timeout=timeout,
        reconnect_timeout=reconnect_timeout,
    )


def build_async_pool(
    url: str,
    *,
    max_size: int,
    name: str,
    timeout: float,
    reconnect_timeout: float,
    options: str = "",
) -> AsyncConnectionPool[Any]:
    """An asyncio pool of autocommit connections to ``url`` (each statement its own
    transaction), not yet open. ``options`` are extra server settings for its sessions, set once
    per connection (``-c lock_timeout=2s``), not per transaction. No check on checkout (a round
    trip per request): the caller retries once after ``pool.check()`` when a connection broke."""
    kwargs: dict[str, Any] = dict(connection_kwargs())
    kwargs["options"] = f"{kwargs['options']} {options}".strip()
    kwargs["autocommit"] = True
    return AsyncConnectionPool(
        url,
        min_size=min(2, max_size),
        max_size=max_size,
        open=False,
        kwargs=kwargs,
        name=name,
        timeout=timeout,
        reconnect_timeout=reconnect_timeout,
    )


def open_pool(url: str, *, min_size: int = 1, max_size: int = 4, name: str = "followup") -> Any:
    """Open a checked pool of connections to ``url``, waiting for it; the caller closes it."""
    pool = build_pool(url, min_size=min_size, max_size=max_size, name=name)
    try:
        pool.open(wait=True, timeout=POOL_TIMEOUT_S)
    except Exception as error:
        pool.close()
        raise StoreUnavailable(f"cannot reach the database: {error}") from error
    return pool


def connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """One dedicated connection (outside any pool), e.g. to hold a session advisory lock."""
    try:
        return psycopg.connect(url, **{**connection_kwargs(), **kwargs})
    except psycopg.OperationalError as error:
        raise StoreUnavailable(f"cannot reach the database: {error}") from error


def require_transaction(conn: psycopg.Connection[Any], what: str) -> None:
    """Refuse to run ``what`` outside a transaction the caller opened (the store's rule)."""
    if conn.info.transaction_status != pq.TransactionStatus.INTRANS:
        raise StoreError(f"{what} must be called inside a transaction (with conn.transaction())")


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """Turn psycopg's errors into the project's own."""
    try:
        yield
    except psycopg.OperationalError as error:
        raise StoreUnavailable(str(error)) from error
    except psycopg.Error as error:
        raise StoreError(str(error)) from error


def resolve_database_url(
    settings: Settings, *, stop_at_exit: bool = True, create: bool = False
) -> str:
    """The configured URL, or the embedded cluster's (started if need be).

    This process uses the embedded cluster until it exits; a cluster it started is stopped
    then, once no other process uses it (docs/architecture.md §6). Only ``create`` makes a new
    cluster: any other command refuses to run on a machine that does not exist.
    """
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    cluster = EmbeddedCluster(settings.home)
    if not create and not cluster.exists():
        raise ConfigError(no_machine(settings))
    cluster.acquire()
    if stop_at_exit:
        atexit.register(cluster.release)
    return cluster.url("followup")


def no_machine(settings: Settings) -> str:
    """What to say when there is no machine at ``FOLLOWUP_HOME``."""
    return (
        f"no machine at {settings.home} (FOLLOWUP_HOME): start one with `make run` in the "
        "checkout, or point FOLLOWUP_HOME at a machine's folder, or FOLLOWUP_DATABASE_URL at "
        "its database"
    )
