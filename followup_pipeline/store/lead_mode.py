"""Lead intake's mode (``lead_intake_mode``, docs/architecture.md §9): ``shadow`` runs every step
and reads the CRM, and records what it would write without writing it; ``live`` writes each lead
to the CRM. A fresh installation starts in shadow (``FOLLOWUP_LEAD_INTAKE_MODE`` seeds the one row
on its first read, and only then); a person switches it with ``followup leads go-live`` after a
``followup leads compare``, and back with ``followup leads shadow``, each recorded in the audit
(subject ``lead-intake``) beside the switch. A dry run (``FOLLOWUP_DRY_RUN``) is shadow whatever
the row says.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg

from followup_pipeline.domain.localtime import for_people
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.db import fetch_one
from followup_pipeline.store.queries import query

Mode = Literal["shadow", "live"]
#: The audit's subject of every switch and comparison.
SUBJECT = "lead-intake"
#: The audit's actions: a comparison (its summary), and the two switches.
COMPARED, WENT_LIVE, WENT_SHADOW = "leads.compare", "leads.go_live", "leads.shadow"
#: Who the first row is by, when the setting seeded it.
SEEDED_BY = "FOLLOWUP_LEAD_INTAKE_MODE at the first start"
#: Who the first row is by, when migration 0022 found live CRM writes on record.
UPGRADE_BY = "the upgrade: live CRM writes on record"


@dataclass(frozen=True)
class LeadMode:
    """The mode on record, since when and by whom."""

    mode: Mode
    changed_at: datetime
    changed_by: str


@dataclass(frozen=True)
class InForce:
    """The mode a run works in: the record's, or shadow in a dry run (``why`` says which)."""

    mode: Mode
    record: LeadMode
    why: str


def recorded(conn: psycopg.Connection[Any], *, seed: Mode) -> LeadMode:
    """The mode on record; on the first read, ``seed`` (the setting) becomes it."""
    conn.execute(query("lead_mode_seed"), {"mode": seed, "at": None, "by": SEEDED_BY})
    row = fetch_one(conn, LeadMode, query("lead_mode_current"))
    assert row is not None  # seeded just now, or before
    return row


def in_force(conn: psycopg.Connection[Any], settings: Settings) -> InForce:
    """The mode lead intake works in now."""
    record = recorded(conn, seed=settings.lead_intake_mode)
    if settings.dry_run:
        return InForce("shadow", record, f"FOLLOWUP_DRY_RUN (on record: {record.mode})")
    since = for_people(record.changed_at, settings.timezone)
    return InForce(record.mode, record, f"since {since}, by {record.changed_by}")


def switch(
    conn: psycopg.Connection[Any],
    mode: Mode,
    *,
    by: str,
    settings: Settings,
    reason: str | None = None,
    detail: str | None = None,
) -> LeadMode | None:
    """Set the mode and record who did it, in the caller's transaction; the record before, or
    None (nothing done) when the mode on record is ``mode`` already (another switch won)."""
    recorded(conn, seed=settings.lead_intake_mode)
    before = fetch_one(conn, LeadMode, query("lead_mode_set"), {"mode": mode, "at": None, "by": by})
    if before is None:
        return None
    change = f"{before.mode} → {mode}" + (f"; {detail}" if detail else "")
    action = WENT_LIVE if mode == "live" else WENT_SHADOW
    audit.record(conn, actor=by, action=action, subject=SUBJECT, detail=change, reason=reason)
    return before


def record_comparison(conn: psycopg.Connection[Any], *, by: str, summary: str) -> None:
    """Keep a comparison's summary, for the switch to show."""
    audit.record(conn, actor=by, action=COMPARED, subject=SUBJECT, detail=summary)


def last_comparison(conn: psycopg.Connection[Any]) -> audit.Entry | None:
    """The newest comparison's audit entry, None when there was none."""
    found = audit.entries(conn, subject=SUBJECT, limit=500)
    return next((entry for entry in found if entry.action == COMPARED), None)


#: Who the demo's switch is by (``followup dev`` on the sandbox).
DEMO_BY = "the demo: its CRM is the sandbox's"


def at_start(conn: psycopg.Connection[Any], settings: Settings, *, sandbox: bool) -> str:
    """``followup dev``'s start: the demo (on the sandbox) runs live, unless a person chose
    otherwise; with real vendors, a live mode the demo set goes back to shadow. One line for
    the console saying which."""
    record = recorded(conn, seed=settings.lead_intake_mode)
    # The upgrade's "live" in a home where the demo ran: those writes went to the sandbox.
    demo_ran = (settings.home / "sandbox" / "state.json").exists()
    by_demo = record.changed_by == DEMO_BY or (record.changed_by == UPGRADE_BY and demo_ran)
    if sandbox and record.mode == "shadow" and record.changed_by == SEEDED_BY:
        switch(conn, "live", by=DEMO_BY, settings=settings, reason="the demo writes its leads")
    elif not sandbox and record.mode == "live" and by_demo:
        switch(conn, "shadow", by="the start with real vendors", settings=settings,
               reason="the demo's live mode does not carry over to a real CRM")  # fmt: skip
    mode = in_force(conn, settings)
    if mode.mode == "live" and mode.record.changed_by == DEMO_BY:
        return (
            "lead intake: live, each lead is written to the sandbox's CRM (the demo's choice; "
            "a real installation starts in shadow)"
        )
    if mode.mode == "live":
        return f"lead intake: live, each lead is written to the CRM ({mode.why})"
    return (
        f"lead intake: shadow, nothing is written to the CRM ({mode.why}); "
        "`followup leads compare`, then `followup leads go-live`"
    )
