"""A run's presence in Postgres: one session of its own, named after the run, held while it runs.

A run's process that dies takes its session with it: at once when the process is killed (its
socket closes), within about a minute when its whole host vanishes (the server's TCP keepalives
set below give up on a silent peer after 30 + 3 × 10 s). The ``dead_runs`` sensor
(``engine/reaper.py``) fails a run whose presence is gone. ``PostgresResource`` holds it.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.store.db import StoreError, connect

#: How a presence's ``application_name`` begins; the run's id follows.
PREFIX = "followup-run:"
#: The run tag that says a run holds a presence: only such runs are ever judged by it. A retry
#: copies its run's tags, so a run whose presence could not be opened says ``TAG_NONE``.
TAG = "followup/presence"
TAG_VALUE = "postgres"
TAG_NONE = "none"
#: The tag a job that opens a presence gives its runs from the start (``engine.runs.time_limit``):
#: a run killed before its first step opened the presence is still judged by it, once it has
#: been started for ``START_GRACE_S``.
TAG_EXPECTED = "expected"
#: How long a run may be started without its presence yet (its process starting, its code
#: loading) before it is judged absent.
START_GRACE_S = 120.0
#: Server-side keepalives of a presence's session: idle seconds before the first probe, seconds
#: between probes, probes unanswered before the server drops the session.
KEEPALIVE_IDLE_S = 30
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_COUNT = 3


def application_name(run_id: str) -> str:
    """The ``application_name`` of the presence of run ``run_id``."""
    return f"{PREFIX}{run_id}"


def open_presence(url: str, run_id: str) -> psycopg.Connection[Any]:
    """Open the presence of run ``run_id``: a dedicated connection (outside any pool), idle
    until it is closed. Raises ``StoreUnavailable`` when the database cannot be reached."""
    name = application_name(run_id)
    conn = connect(url, autocommit=True, application_name=name)
    try:
        # For this session only: a vanished host's session is dropped in about a minute,
        # instead of after the system's default of two hours or more.
        conn.execute(
            "SELECT set_config('tcp_keepalives_idle', %(idle)s, false),"
            " set_config('tcp_keepalives_interval', %(interval)s, false),"
            " set_config('tcp_keepalives_count', %(count)s, false)",
            {
                "idle": str(KEEPALIVE_IDLE_S),
                "interval": str(KEEPALIVE_INTERVAL_S),
                "count": str(KEEPALIVE_COUNT),
            },
        )
        if conn.info.server_version >= 140000:
            # A server-wide idle_session_timeout would end the idle presence of a live run.
            conn.execute("SELECT set_config('idle_session_timeout', '0', false)")
        # Behind a transaction pooler the session is nobody's between statements and would
        # look gone: such a presence is refused, and the run is never judged by it.
        seen = conn.execute(
            "SELECT 1 AS seen FROM pg_stat_activity"
            " WHERE pid = pg_backend_pid() AND application_name = %s",
            (name,),
        ).fetchone()
        if seen is None:
            raise StoreError(
                "the presence's session is not in pg_stat_activity under its name (a pooler?)"
            )
    except BaseException:
        conn.close()
        raise
    return conn


@dataclass(frozen=True)
class Presences:
    """The runs whose presence is live, and when the database server started (a restart ends
    every presence, whether or not its run lives on)."""

    run_ids: frozenset[str]
    server_started: datetime


def live_presences(conn: psycopg.Connection[Any]) -> Presences:
    """The live presences on the server (every database of it: run ids are unique)."""
    rows = conn.execute(
        "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE %s",
        (f"{PREFIX}%",),
    ).fetchall()
    row = conn.execute("SELECT pg_postmaster_start_time() AS started").fetchone()
    if row is None:
        raise StoreError("pg_postmaster_start_time() returned no row")
    return Presences(
        run_ids=frozenset(str(name["application_name"]).removeprefix(PREFIX) for name in rows),
        server_started=row["started"],
    )
