"""The audit of operator actions (``audit_log``): who did what, to which subject, when and why;
``followup audit list`` and ``followup watches explain`` show it. Rows are only ever added."""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.store.db import fetch_all, storable
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class Entry:
    """One operator action."""

    id: int
    at: datetime
    actor: str
    action: str
    subject: str | None
    detail: str | None
    reason: str | None


def os_user() -> str:
    """Who runs this command, as the operating system knows them (``--by``'s default): under
    ``sudo``, the person who ran it."""
    by_sudo = os.environ.get("SUDO_USER", "").strip()
    if by_sudo:
        return by_sudo
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's bare user)
        return "unknown"


def actor(text: str) -> str:
    """A ``--by`` value: a name, not blank (``ValueError`` otherwise, which argparse reports)."""
    if not text.strip():
        raise ValueError("who does it, not blank")
    return text.strip()


def record(
    conn: psycopg.Connection[Any],
    *,
    actor: str,
    action: str,
    subject: str | None = None,
    detail: str | None = None,
    reason: str | None = None,
    at: datetime | None = None,
) -> int:
    """Record one operator action (in the caller's transaction, beside what it did)."""
    params = {
        "actor": storable(actor, 200),
        "action": action,
        "subject": storable(subject, 500) if subject is not None else None,
        "detail": storable(detail, 2000) if detail is not None else None,
        "reason": storable(reason, 2000) if reason is not None else None,
        "at": at,
    }
    row = conn.execute(query("audit_record"), params).fetchone()
    assert row is not None
    return int(row["id"])


def entries(
    conn: psycopg.Connection[Any],
    *,
    subject: str | None = None,
    since: datetime | None = None,
    limit: int = 200,
) -> list[Entry]:
    """The audit, newest first."""
    params = {"subject": subject, "since": since, "limit": limit}
    return fetch_all(conn, Entry, query("audit_entries"), params)
