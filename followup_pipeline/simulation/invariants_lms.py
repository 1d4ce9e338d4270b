"""The invariants of a simulation about the other two pipelines (``invariants.py`` runs them):
every lead event ended as one CRM Lead, a review item, a dead letter or a deliberate non-lead,
and no two CRM Leads share an address; every learning reminder due was sent once, suppressed
with its reason or parked with an owner; no certificate issued twice for one learner and course;
no content version published twice."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime, time, timedelta
from typing import Any, LiteralString

import psycopg

from followup_pipeline.defs.lms.remind import marker
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.leads import (
    LeadIn,
    LeadRejected,
    from_crm_lead,
    from_payment,
    from_site_form,
)
from followup_pipeline.domain.localtime import local_date, local_to_utc
from followup_pipeline.domain.work import NOBODY
from followup_pipeline.settings import LEAD_SOURCES, Settings
from followup_pipeline.simulation.evidence import Evidence, Invariant, rows, verdict
from followup_pipeline.store.lead_review import LEAD_SUBJECT

LEAD_EVENTS: LiteralString = """
SELECT e.id, e.source, e.status, e.attempts, e.body, l.crm_lead_id AS lead_crm_id,
       (SELECT c.result FROM followup.step_completions c
        WHERE c.key = e.id || ':0:crm_upsert') AS upsert,
       (SELECT c.result FROM followup.step_completions c
        WHERE c.key = e.id || ':0:classify') AS classify,
       EXISTS (SELECT 1 FROM followup.step_completions c
               WHERE c.key = e.id || ':0:normalise') AS normalised,
       r.id AS review_id, r.resolved_at AS review_resolved_at
FROM followup.events e
LEFT JOIN followup.lead_events le ON le.event_id = e.id
LEFT JOIN followup.leads l ON l.id = le.lead_id
LEFT JOIN LATERAL (
    SELECT i.id, i.resolved_at FROM followup.review_items i
    WHERE i.subject_type = %(subject)s AND i.subject_id = e.id::text
    ORDER BY i.id DESC LIMIT 1
) r ON true
WHERE e.source = ANY(%(sources)s)
ORDER BY e.id
"""
REMINDERS: LiteralString = """
SELECT r.idempotency_key, r.due_at, r.delivery_outcome, r.reason, t.mode, t.time_zone,
       t.hours_start, t.hours_end, t.holiday_country, t.holiday_subdivision,
       q.owner AS queue_owner
FROM followup.lms_reminders r
JOIN followup.tenants t ON t.id = r.tenant_id
LEFT JOIN followup.work_items q ON q.action_key = r.idempotency_key AND q.state <> 'closed'
ORDER BY r.due_at, r.id
"""
CONTENT: LiteralString = """
SELECT c.idempotency_key, c.state, c.published_at,
       (SELECT count(*) FROM followup.action_attempts t
        JOIN followup.actions a ON a.id = t.action_id
        WHERE a.idempotency_key = c.idempotency_key AND t.outcome IN ('accepted', 'confirmed')
       )::int AS shown
FROM followup.lms_content c
ORDER BY c.tenant_id, c.content_id, c.version
"""


def leads(conn: psycopg.Connection[Any], evidence: Evidence, settings: Settings) -> list[Invariant]:
    """The lead events' ends, and one CRM Lead per e-mail address."""
    return [lead_events_ended(conn, evidence, settings), one_crm_lead_per_address(evidence)]


def lead_events_ended(
    conn: psycopg.Connection[Any], evidence: Evidence, settings: Settings
) -> Invariant:
    """Every event of a lead source (``site-form``, ``payment``, ``crm-changes``) ended as:

    - one CRM Lead: its ``crm_upsert`` step recorded a Lead (or the person's Lead) that the CRM
      holds; or what shadow mode would have written (``suppressed``, ``shadow``), or the step's
      recorded reason to write nothing;
    - a review item waiting for a person (the model's answer failed its check);
    - a dead letter, with an owner;
    - a deliberate non-lead: done without a lead because its body makes none by the lead
      parsers' own rule (a payment event that is no paid checkout, a CRM Lead without an
      e-mail address). The machine records no reason for it: the check applies the parser
      again to the stored body.
    """
    params = {"subject": LEAD_SUBJECT, "sources": list(LEAD_SOURCES)}
    found = rows(conn, LEAD_EVENTS, params)
    held = {lead.id for lead in evidence.crm_leads}
    broken: list[str] = []
    for row in found:
        problem = _lead_problem(row, held, settings)
        if problem is not None:
            broken.append(f"event:{row['id']} ({row['source']}): {problem}")
    return verdict("lead events ended once", len(found), broken)


def _lead_problem(row: dict[str, Any], held: set[str], settings: Settings) -> str | None:
    """What is wrong with how a lead event ended, None when it ended well."""
    status = row["status"]
    if status == "dead":
        return None if settings.ops_owner else "a dead letter with no owner (FOLLOWUP_OPS_OWNER)"
    if status != "done":
        return f"still {status} after {row['attempts']} attempt(s)"
    upsert: Mapping[str, Any] | None = row["upsert"]
    if upsert is not None:
        if "shadow" in upsert or "skipped" in upsert:
            return None  # recorded, not written: shadow mode, or the step's reason
        crm_lead_id = upsert.get("crm_lead_id") or row["lead_crm_id"]
        if crm_lead_id is None:
            return "its CRM write names no Lead"
        return None if crm_lead_id in held else f"its CRM Lead {crm_lead_id} is not in the CRM"
    classify: Mapping[str, Any] | None = row["classify"]
    if classify is not None and "review_item" in classify:
        if row["review_id"] is not None and row["review_resolved_at"] is None:
            return None  # waits for a person in the review list
        return "its review item was decided, and no CRM Lead was written after"
    if not row["normalised"]:
        try:
            lead = _parser(row["source"], settings)(bytes(row["body"] or b""))
        except LeadRejected as rejected:
            return f"done, though its body makes no lead ({rejected}): a dead letter's case"
        if lead is None:
            return None  # a deliberate non-lead
    return "done without a CRM Lead, a review item or a reason"


def _parser(source: str, settings: Settings) -> Callable[[bytes], LeadIn | None]:
    """The lead parser of a source, as ``normalise`` applies it."""
    if source == "site-form":
        return lambda body: from_site_form(body, settings.site_form_fields)
    return from_payment if source == "payment" else from_crm_lead


def one_crm_lead_per_address(evidence: Evidence) -> Invariant:
    """No two Leads in the CRM share an e-mail address (trimmed, case ignored)."""
    by_address: dict[str, list[str]] = defaultdict(list)
    for lead in evidence.crm_leads:
        if lead.email and lead.email.strip():
            by_address[lead.email.strip().casefold()].append(lead.id)
    broken = [
        f"{address}: {len(ids)} CRM Leads ({', '.join(ids)})"
        for address, ids in sorted(by_address.items())
        if len(ids) > 1
    ]
    return verdict("one CRM Lead per address", len(evidence.crm_leads), broken)


def learning(
    conn: psycopg.Connection[Any], evidence: Evidence, settings: Settings, *, end: datetime
) -> list[Invariant]:
    """The learning reminders, the certificates and the published content."""
    return [
        reminders_once(conn, evidence, settings, end=end),
        certificates_once(evidence),
        content_published_once(conn),
    ]


def reminders_once(
    conn: psycopg.Connection[Any], evidence: Evidence, settings: Settings, *, end: datetime
) -> Invariant:
    """Every learning reminder due by ``end`` was sent once (``accepted`` or ``confirmed``, and
    exactly one message carries its key: a mail in the outbox, or its mark in a Moodle
    message), suppressed with its reason, or waits in the catch-up queue, open, with an owner;
    and no reminder is on two messages, due or not.

    Due: its instant (``due_at``) passed by ``end`` and its tenant's business hours were open
    at some moment between the two (the runs act only then); a tenant switched ``off`` acts on
    nothing and is left out.
    """
    found = rows(conn, REMINDERS)
    checked = 0
    broken: list[str] = []
    for row in found:
        key = row["idempotency_key"]
        sent = evidence.mail_count(key) + evidence.moodle_marks.get(marker(key), 0)
        if sent > 1:
            broken.append(f"{key}: on {sent} messages")
            continue
        if row["mode"] == "off" or not _was_due(row, end):
            continue
        checked += 1
        outcome = row["delivery_outcome"]
        if outcome in ("accepted", "confirmed"):
            if sent == 0:
                broken.append(f"{key}: {outcome}, and no message carries its key")
        elif outcome == "suppressed":
            if sent:
                broken.append(f"{key}: suppressed ({row['reason']}), and a message went out")
            elif not row["reason"]:
                broken.append(f"{key}: suppressed without a reason")
        else:
            owner = row["queue_owner"]
            if owner is None or owner == NOBODY:
                whose = "without an owner" if owner else "not in the catch-up queue"
                broken.append(f"{key}: {outcome}, {whose}")
            elif sent:
                broken.append(f"{key}: {outcome} and queued with {owner}, but a message went out")
    return verdict("reminders ended once", checked, broken)


def _was_due(row: dict[str, Any], end: datetime) -> bool:
    """Whether a reminder fell due by ``end`` with its tenant's business hours open since."""
    due_at: datetime = row["due_at"]
    if due_at > end:
        return False
    zone = row["time_zone"]
    calendar = BusinessCalendar(row["holiday_country"], row["holiday_subdivision"])
    day = local_date(due_at, zone)
    while day <= local_date(end, zone):
        if calendar.is_business_day(day):
            opens = local_to_utc(day, time(row["hours_start"]), zone)
            ends = row["hours_end"]
            closes = (
                local_to_utc(day + timedelta(days=1), time(0), zone)
                if ends >= 24
                else local_to_utc(day, time(ends), zone)
            )
            first = max(opens, due_at)  # the first moment it could be sent that day
            if first < closes and first <= end:
                return True
        day += timedelta(days=1)
    return False


def certificates_once(evidence: Evidence) -> Invariant:
    """Accredible holds at most one credential per learner and course: one per group and
    recipient address within an account, and one per ``lms-cert:{tenant}:{learner}:{course}``
    (its generation aside; a lost one is gone from the platform and issued again)."""
    held: dict[str, list[str]] = defaultdict(list)
    for credential in evidence.credentials:
        held[f"{credential.account} group {credential.group_id} to {credential.email}"].append(
            credential.id
        )
        key = credential.license_id or ""
        if key.startswith("lms-cert:"):
            held[key.rsplit(":", 1)[0]].append(credential.id)
    broken = [
        f"{what}: {len(ids)} credentials ({', '.join(ids)})"
        for what, ids in sorted(held.items())
        if len(ids) > 1
    ]
    return verdict("certificates issued once", len(evidence.credentials), broken)


def content_published_once(conn: psycopg.Connection[Any]) -> Invariant:
    """No content version was shown in Moodle twice (one attempt of its publication reached
    Moodle at most), and no outdated (``superseded``) version was published at all."""
    found = rows(conn, CONTENT)
    broken: list[str] = []
    for row in found:
        key = row["idempotency_key"]
        if row["shown"] > 1:
            broken.append(f"{key}: published {row['shown']} times")
        if row["state"] == "superseded" and row["published_at"] is not None:
            broken.append(f"{key}: outdated, and published")
    return verdict("content published once", len(found), broken)
