"""The account of every due action of a window (docs/architecture.md §13), the engine's: each
pipeline's follow-up steps and their tasks, events and CRM writes, reports, alerts, reminders,
certificates and publications, each ended done, suppressed with its reason, waiting on the list
of work with its owner, in flight, not late yet, or unaccounted (``domain/account.py``).

``followup account`` prints it and fails when anything is unaccounted; ``/metrics`` exports the
last seven days (the ingress reads the same queries); the simulation holds "nothing unaccounted
after its grace" as an invariant.
"""

from __future__ import annotations

from datetime import datetime, time
from typing import Any

import psycopg

from followup_pipeline.domain.account import Account, build
from followup_pipeline.engine.work import sync as sync_work
from followup_pipeline.settings import Settings
from followup_pipeline.store import account as store


def account(
    conn: psycopg.Connection[Any],
    settings: Settings,
    *,
    since: datetime,
    until: datetime,
    pipeline: str | None = None,
    sync: bool = True,
) -> Account:
    """The account of the actions due from ``since`` to ``until`` (of ``pipeline`` only, if
    given); with ``sync``, the list of work brought up to date first (``engine/work.py``)."""
    if sync:
        sync_work(conn, settings, at=until)
    with conn.transaction():
        read = store.read(conn, since, until)
    opens = time(settings.business_hours_start)
    return build(read, opens=opens, since=since, until=until, pipeline=pipeline)
