"""Certificates of learning reminders (``lms_certificates``, docs/architecture.md §10): a learner
who met a course's completion requirements, and the export of their certificate to the credential
platform, one generation after another when the platform loses one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query


def certificate_key(tenant_id: str, learner_id: int, course_id: int, generation: int) -> str:
    """The idempotency key of a certificate's export (its ``generation``-th)."""
    return f"lms-cert:{tenant_id}:{learner_id}:{course_id}:{generation}"


@dataclass(frozen=True)
class Completion:
    """A learner seen complete in a course whose certificates a group of the platform issues."""

    tenant_id: str
    learner_id: int
    course_id: int
    group_id: int
    learner_name: str | None
    learner_email: str | None
    completed_at: datetime


@dataclass(frozen=True)
class CertificateRow:
    """A completion and where the export of its certificate stands."""

    tenant_id: str
    learner_id: int
    course_id: int
    group_id: int
    learner_name: str | None
    learner_email: str | None
    completed_at: datetime
    generation: int
    idempotency_key: str
    state: str
    reason: str | None
    credential_id: str | None
    confirmed_at: datetime | None
    lost_at: datetime | None
    seen_at: datetime


def seen(conn: psycopg.Connection[Any], row: Completion, *, at: datetime) -> bool:
    """Record the completion (once); whether it is new."""
    params = {
        "tenant_id": row.tenant_id,
        "learner_id": row.learner_id,
        "course_id": row.course_id,
        "group_id": row.group_id,
        "learner_name": row.learner_name,
        "learner_email": row.learner_email,
        "completed_at": row.completed_at,
        "key": certificate_key(row.tenant_id, row.learner_id, row.course_id, 1),
        "at": at,
    }
    answer = conn.execute(query("lms_certificate_seen"), params).fetchone()
    return bool(answer and answer["new"])


def rows(conn: psycopg.Connection[Any], tenant_id: str | None = None) -> list[CertificateRow]:
    """The certificates (of a tenant)."""
    return fetch_all(conn, CertificateRow, query("lms_certificate_rows"), {"tenant_id": tenant_id})


def set_state(
    conn: psycopg.Connection[Any],
    row: CertificateRow,
    state: str,
    *,
    at: datetime,
    reason: str | None = None,
    credential_id: str | None = None,
) -> None:
    """Record where the export of ``row``'s generation stands."""
    params = {
        "tenant_id": row.tenant_id,
        "learner_id": row.learner_id,
        "course_id": row.course_id,
        "key": row.idempotency_key,
        "state": state,
        "reason": reason,
        "credential_id": credential_id,
        "at": at,
    }
    conn.execute(query("lms_certificate_state"), params)


def reissue(conn: psycopg.Connection[Any], row: CertificateRow, *, lost: bool, at: datetime) -> str:
    """Move the certificate to its next generation (to be issued again); the new key."""
    new_key = certificate_key(row.tenant_id, row.learner_id, row.course_id, row.generation + 1)
    params = {
        "tenant_id": row.tenant_id,
        "learner_id": row.learner_id,
        "course_id": row.course_id,
        "key": row.idempotency_key,
        "new_key": new_key,
        "lost": lost,
        "at": at,
    }
    conn.execute(query("lms_certificate_reissue"), params)
    return new_key


def set_checked(conn: psycopg.Connection[Any], tenant_id: str, at: datetime) -> None:
    """When the tenant's certificates were last reconciled with the platform."""
    conn.execute(query("lms_tenant_certificates_checked"), {"id": tenant_id, "at": at})
