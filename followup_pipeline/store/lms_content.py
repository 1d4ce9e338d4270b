"""Content an academy publishes (``lms_content``, docs/architecture.md §10): one row per version,
its material a course module in Moodle kept hidden until published; the approval and the version
are ours. Only the highest version of a content id is current."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.store.db import fetch_all, fetch_one
from followup_pipeline.store.queries import query


def content_lock(tenant_id: str, content_id: str) -> str:
    """The name of the lock on a piece of content, every version of it: a run holds it from the
    re-check to Moodle's answer, ``followup lms content add`` and ``approve`` while they write."""
    return f"content:{tenant_id}:{content_id}"


def publish_key(tenant_id: str, content_id: str, version: int) -> str:
    """The idempotency key of a version's publication."""
    return f"lms-publish:{tenant_id}:{content_id}:v{version}"


@dataclass(frozen=True)
class ContentVersion:
    """A version of a piece of content, as the academy added it."""

    tenant_id: str
    content_id: str
    version: int
    title: str
    course_id: int
    cmid: int
    publish_at: datetime


@dataclass(frozen=True)
class ContentRow:
    """A version with its approval, where it stands, and the current version of its content."""

    tenant_id: str
    content_id: str
    version: int
    title: str
    course_id: int
    cmid: int
    publish_at: datetime
    approved_by: str | None
    approved_at: datetime | None
    state: str
    reason: str | None
    idempotency_key: str
    published_at: datetime | None
    #: When it was added (by the database's clock).
    created_at: datetime
    current_version: int

    @property
    def current(self) -> bool:
        """Whether no later version of the content exists."""
        return self.version >= self.current_version


def save(conn: psycopg.Connection[Any], row: ContentVersion) -> bool | None:
    """Add a version (or change one that waits or that Moodle refused, withdrawing its
    approval); True: new, False: changed, None: it was published or settled already and stays
    as it is."""
    params = {
        "tenant_id": row.tenant_id,
        "content_id": row.content_id,
        "version": row.version,
        "title": row.title,
        "course_id": row.course_id,
        "cmid": row.cmid,
        "publish_at": row.publish_at,
        "key": publish_key(row.tenant_id, row.content_id, row.version),
    }
    answer = conn.execute(query("lms_content_save"), params).fetchone()
    return None if answer is None else bool(answer["new"])


def approve(
    conn: psycopg.Connection[Any],
    tenant_id: str,
    content_id: str,
    version: int,
    *,
    by: str,
    at: datetime,
) -> bool:
    """Record the approval of a version that waits, by ``by``; whether there was one."""
    params = {
        "tenant_id": tenant_id,
        "content_id": content_id,
        "version": version,
        "by": by,
        "at": at,
    }
    return conn.execute(query("lms_content_approve"), params).fetchone() is not None


def rows(
    conn: psycopg.Connection[Any], tenant_id: str | None = None, *, due: datetime | None = None
) -> list[ContentRow]:
    """The content (of a tenant); with ``due``, what is due by then and not settled, and what
    was published and not read back."""
    params = {"tenant_id": tenant_id, "due": due}
    return fetch_all(conn, ContentRow, query("lms_content_rows"), params)


def lock(
    conn: psycopg.Connection[Any], tenant_id: str, content_id: str, version: int
) -> ContentRow | None:
    """The version, locked until the transaction ends (the re-check before a publication)."""
    params = {"tenant_id": tenant_id, "content_id": content_id, "version": version}
    return fetch_one(conn, ContentRow, query("lms_content_lock"), params)


def set_state(
    conn: psycopg.Connection[Any],
    row: ContentRow,
    state: str,
    *,
    at: datetime,
    reason: str | None = None,
) -> None:
    """Record where a version stands (and why)."""
    params = {
        "tenant_id": row.tenant_id,
        "content_id": row.content_id,
        "version": row.version,
        "state": state,
        "reason": reason,
        "at": at,
    }
    conn.execute(query("lms_content_state"), params)
