"""Learning reminders as the store keeps them (docs/architecture.md §10): tenants, the quizzes
assigned to learners (``lms_assignments``), a durable record per reminder (``lms_reminders``)
and the learners who opted out (``lms_opt_outs``). What a sync writes of them: ``lms_plans.py``."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import date, datetime, time, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from followup_pipeline.store.db import fetch_all
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class Tenant:
    """An academy: its Moodle site, zone, calendar, channel, plan and mode."""

    id: str
    name: str
    moodle_url: str
    token_ref: str
    time_zone: str
    holiday_country: str = "DE"
    holiday_subdivision: str | None = None
    channel: str = "email"
    sender: str | None = None
    course_ids: list[int] = field(default_factory=list)
    before_days: int = 2
    after_business_days: int = 3
    remind_at: time = time(9, 0)
    hours_start: int = 8
    hours_end: int = 18
    mode: str = "dry"
    owner: str | None = None
    backup: str | None = None
    #: The credential platform's key of the tenant: its name in FOLLOWUP_LMS_TOKENS.
    credential_token_ref: str | None = None
    #: Which credential group certifies each course: {"7": 12} (course id as text).
    credential_groups: dict[str, int] = field(default_factory=dict)
    synced_at: datetime | None = None
    certificates_checked_at: datetime | None = None
    created_at: datetime | None = None
    #: When a run last reached its Moodle; since when, and why, it cannot (None: it can).
    reached_at: datetime | None = None
    unreachable_since: datetime | None = None
    unreachable_error: str | None = None
    #: What its learners and owner read (a learner's own Moodle language first): ``de``, ``en``.
    language: str = "en"

    @property
    def unreachable(self) -> bool:
        """Whether the last run that tried could not reach its Moodle."""
        return self.unreachable_since is not None

    def params(self) -> dict[str, object]:
        """The upsert's parameters."""
        names = [f.name for f in fields(self) if f.name not in NOT_SET_BY_HAND]
        values: dict[str, object] = {name: getattr(self, name) for name in names}
        values["credential_groups"] = Jsonb(self.credential_groups)
        return values


#: What a tenant's upsert leaves as the runs record it.
NOT_SET_BY_HAND = (
    "synced_at",
    "certificates_checked_at",
    "created_at",
    "reached_at",
    "unreachable_since",
    "unreachable_error",
)


@dataclass(frozen=True)
class DueRow:
    """A reminder due and not settled, with what its send needs."""

    id: int
    tenant_id: str
    learner_id: int
    assignment_id: int
    action_type: str
    due_at: datetime
    time_zone: str
    local_day: date
    idempotency_key: str
    delivery_outcome: str
    course_id: int
    coursemodule: int
    learner_name: str | None
    learner_email: str | None
    quiz_name: str
    quiz_due_at: datetime | None
    completed_at: datetime | None
    #: The learner's language and zone as Moodle gives them (None: the academy's).
    learner_lang: str | None = None
    learner_zone: str | None = None


@dataclass(frozen=True)
class TenantStatus:
    """A tenant's reminders by outcome (``followup lms status``, ``/metrics``)."""

    tenant_id: str
    mode: str
    time_zone: str
    reached_at: datetime | None
    unreachable_since: datetime | None
    unreachable_error: str | None
    overdue: int
    failures: int
    superseded: int
    opted_out: int
    completed: int
    expired: int
    dry_run: int
    sent: int
    confirmed: int
    planned: int
    #: Open items of the catch-up queue (reminders, certificates, publications).
    queued: int = 0


#: The window of the settled counts that ``followup lms status``, /metrics and the weekly mail
#: show (overdue, failures and planned are as they stand).
STATUS_WINDOW = timedelta(days=7)
#: What ``/metrics`` shows of each tenant's reminders (``followup_lms_reminders``).
LMS_STATES = (
    "overdue",
    "failures",
    "superseded",
    "opted_out",
    "completed",
    "expired",
    "sent",
    "confirmed",
    "queued",
)


def tenants(conn: psycopg.Connection[Any]) -> list[Tenant]:
    """Every tenant."""
    return fetch_all(conn, Tenant, query("lms_tenants"))


def save_tenant(conn: psycopg.Connection[Any], tenant: Tenant) -> None:
    """Make or change a tenant."""
    conn.execute(query("lms_tenant_upsert"), tenant.params())


def set_reached(
    conn: psycopg.Connection[Any], tenant_id: str, at: datetime, error: str | None = None
) -> None:
    """A run reached the tenant's Moodle at ``at``; with ``error``, it could not (since the
    first such run after it was last reached)."""
    name = "lms_tenant_unreachable" if error is not None else "lms_tenant_reached"
    conn.execute(query(name), {"id": tenant_id, "at": at, "error": error})


def set_synced(conn: psycopg.Connection[Any], tenant_id: str, at: datetime) -> None:
    """When the tenant's last whole sync ended."""
    conn.execute(query("lms_tenant_synced"), {"id": tenant_id, "at": at})


def _assignment(tenant_id: str, learner_id: int, quiz_id: int) -> dict[str, object]:
    return {"tenant_id": tenant_id, "learner_id": learner_id, "quiz_id": quiz_id}


def mark_completed(
    conn: psycopg.Connection[Any], tenant_id: str, learner_id: int, quiz_id: int, at: datetime
) -> None:
    """The learner completed the quiz (first seen at ``at``)."""
    params = {**_assignment(tenant_id, learner_id, quiz_id), "at": at}
    conn.execute(query("lms_assignment_completed"), params)


def mark_succeeded(
    conn: psycopg.Connection[Any], tenant_id: str, learner_id: int, quiz_id: int, at: datetime
) -> None:
    """A reminder of the assignment reached the provider at ``at``."""
    params = {**_assignment(tenant_id, learner_id, quiz_id), "at": at}
    conn.execute(query("lms_assignment_succeeded"), params)


def due(
    conn: psycopg.Connection[Any], tenant_id: str, now: datetime, *, confirm_since: datetime
) -> list[DueRow]:
    """The tenant's reminders due by ``now`` and not settled, oldest first, and those accepted
    since ``confirm_since`` and not read back yet."""
    params = {"tenant_id": tenant_id, "now": now, "confirm_since": confirm_since}
    return fetch_all(conn, DueRow, query("lms_reminders_due"), params)


def settle(
    conn: psycopg.Connection[Any],
    reminder_id: int,
    outcome: str,
    *,
    at: datetime,
    reason: str | None = None,
) -> None:
    """Record where a reminder stands (``suppressed`` with its reason)."""
    params = {"id": reminder_id, "outcome": outcome, "reason": reason, "at": at}
    conn.execute(query("lms_reminder_settle"), params)


def opted_out(
    conn: psycopg.Connection[Any], tenant_id: str, learner_id: int, action_type: str
) -> bool:
    """Whether the learner opted out of reminders of this type (or all)."""
    params = {"tenant_id": tenant_id, "learner_id": learner_id, "action_type": action_type}
    row = conn.execute(query("lms_opted_out"), params).fetchone()
    return bool(row and row["opted_out"])


def opt_out(
    conn: psycopg.Connection[Any], tenant_id: str, learner_id: int, action_type: str = "all"
) -> None:
    """Record that the learner wants no more reminders (of this type)."""
    params = {"tenant_id": tenant_id, "learner_id": learner_id, "action_type": action_type}
    conn.execute(query("lms_opt_out"), params)


def status(conn: psycopg.Connection[Any], now: datetime, *, since: datetime) -> list[TenantStatus]:
    """Every tenant's reminders: overdue, failed and planned now; settled since ``since``."""
    return fetch_all(conn, TenantStatus, query("lms_status"), {"now": now, "since": since})


def tenant(conn: psycopg.Connection[Any], tenant_id: str) -> Tenant | None:
    """One tenant."""
    found = [t for t in tenants(conn) if t.id == tenant_id]
    return found[0] if found else None


@dataclass(frozen=True)
class LateReminder:
    """A reminder due and neither sent nor settled, with whom and what it is for."""

    key: str
    action_type: str
    due_at: datetime
    learner_id: int
    learner_name: str | None
    quiz_name: str | None


def late_reminders(
    conn: psycopg.Connection[Any], tenant_id: str, *, late_before: datetime
) -> list[LateReminder]:
    """The tenant's reminders due by ``late_before`` and neither sent nor settled."""
    params = {"tenant_id": tenant_id, "late_before": late_before}
    return fetch_all(conn, LateReminder, query("lms_reminders_late"), params)


def decide_reminder(conn: psycopg.Connection[Any], key: str, *, at: datetime) -> bool:
    """A person closed the reminder ``key``'s item with a decision: it is not sent (suppressed,
    ``decided``) unless it went already; whether it changed."""
    params = {"key": key, "at": at}
    return conn.execute(query("lms_reminder_decided"), params).fetchone() is not None
