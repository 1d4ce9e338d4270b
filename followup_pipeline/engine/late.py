"""Late means owned (docs/architecture.md §12, §13): the runs' door to the one list of work
(``engine/work.py``) for an action that can be neither done nor suppressed now, its vendor away
or a person's part missing. ``park`` and ``settle_parked`` are the learning runs'
(``defs/lms/catch_up.py``); ``park_step`` is ``evaluate``'s, for a follow-up step late because
the CRM or ClickUp stays away.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.domain.steps import task_key
from followup_pipeline.domain.work import NOBODY, ClosedHow, ItemKind
from followup_pipeline.settings import Settings
from followup_pipeline.store import lms
from followup_pipeline.store import work as store


def park(
    conn: psycopg.Connection[Any],
    *,
    action_key: str,
    kind: ItemKind,
    tenant: lms.Tenant,
    what: str,
    reason: str,
    settings: Settings,
    at: datetime,
) -> bool:
    """A learning action that can be neither done nor suppressed waits with its tenant's owner
    (the operations' where the tenant names none); whether it is a new item."""
    with conn.transaction():
        store.lock(conn)
        return store.park(
            conn,
            action_key=action_key,
            pipeline="learning",
            kind=kind,
            tenant_id=tenant.id,
            what=what,
            reason=reason,
            owner=tenant.owner or settings.ops_owner or NOBODY,
            backup=tenant.backup or settings.ops_backup,
            at=at,
        )


def park_step(
    conn: psycopg.Connection[Any],
    *,
    watch_id: int,
    step_no: int,
    what: str,
    reason: str,
    settings: Settings,
    at: datetime,
) -> bool:
    """A follow-up step late past its grace, its vendor away, waits with the operations owner
    (``FOLLOWUP_OPS_OWNER``) as ``step:<watch>:<step>``: once while it waits, its reason kept
    current; it closes by itself when the step fires, is skipped or is planned again, or its
    task's action dies (a dead letter of its own, ``sync``). Whether it is a new item."""
    with conn.transaction():
        store.lock(conn)
        return store.park(
            conn,
            subject=f"step:{watch_id}:{step_no}",
            action_key=task_key(watch_id, step_no),
            pipeline="deal_followup",
            kind="step",
            tenant_id=None,
            what=what,
            reason=reason,
            owner=settings.ops_owner or NOBODY,
            backup=settings.ops_backup,
            at=at,
        )


def settle_parked(
    conn: psycopg.Connection[Any], action_key: str, note: str, *, at: datetime
) -> bool:
    """The learning action ``action_key`` was done or settled: its waiting item closes (expired
    when its time passed); whether one did."""
    how: ClosedHow = "expired" if note.startswith("suppressed: expired") else "resolved"
    return store.close_subject(conn, f"action:{action_key}", how, note, at=at)
