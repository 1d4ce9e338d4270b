"""Watches: one per deal and stay in the watched stages; the one place that opens and closes them.

``apply_registrations`` writes what ``domain/registration.py`` decided. Reads are named for what
they return (``open_watches_of``, ``latest_watch_of``); writes for what they do
(``insert_watches``, ``close_watches``). Call inside a transaction where it says so (the store's
rule, ``store/__init__.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

import psycopg

from followup_pipeline.domain.decisions import CloseReason
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.domain.registration import Registration, Subject, subjects_to_close
from followup_pipeline.store.cadences import Plan, Plans
from followup_pipeline.store.db import fetch_all, fetch_one, storable
from followup_pipeline.store.queries import query

SUBJECT_TYPE = "Opportunity"
RegisteredBy = Literal["webhook", "reconcile", "operator"]


@dataclass(frozen=True)
class Watch:
    """A row of ``watches``: a deal followed up from its registration until it closes."""

    id: int
    subject_type: str
    subject_id: str
    subject_name: str
    account_name: str | None
    assigned_user_id: str | None
    stage: str
    cadence_name: str
    offsets: list[int]
    time_zone: str
    base_on: date
    registered_at: datetime
    registered_by: str
    source_event_id: int | None
    last_reset_at: datetime | None
    paused_at: datetime | None
    closed_at: datetime | None
    closed_reason: str | None
    assigned_user_name: str | None
    crm_url: str | None
    last_error: str | None
    last_error_at: datetime | None
    amount: Decimal | None
    amount_currency: str | None
    #: The day a pause ends (the first evaluate of that day resumes it); None: until resumed.
    paused_until: date | None

    @property
    def active_since(self) -> datetime:
        """Since when activity counts for this watch: its last reset, else its registration."""
        return self.last_reset_at or self.registered_at


@dataclass(frozen=True)
class WatchListing(Watch):
    """A watch as the operator's list shows it, with the date of its next open step."""

    next_due_on: date | None


def insert_watch(
    conn: psycopg.Connection[Any],
    *,
    subject: Subject,
    plan: Plan,
    registered_at: datetime,
    registered_by: RegisteredBy,
    source_event_id: int | None = None,
) -> int | None:
    """Open a watch with its steps planned; None when the deal already has an open one."""
    opened = insert_watches(
        conn,
        subjects=[subject],
        plan=plan,
        registered_at=registered_at,
        registered_by=registered_by,
        source_event_id=source_event_id,
    )
    return opened.get(subject.subject_id)


def insert_watches(
    conn: psycopg.Connection[Any],
    *,
    subjects: Sequence[Subject],
    plan: Plan,
    registered_at: datetime,
    registered_by: RegisteredBy,
    source_event_id: int | None = None,
) -> dict[str, int]:
    """Open a watch for each of ``subjects`` (distinct deals) with its steps planned from the
    local date of ``registered_at``, in one statement (each watch lands with its steps): the new
    watch ids by deal; a deal that has an open watch already is left out."""
    if not subjects:
        return {}
    base_on = local_date(registered_at, plan.time_zone)
    steps = plan.steps_from(base_on)
    rows = conn.execute(
        query("insert_watches"),
        {
            "subject_type": SUBJECT_TYPE,
            "subject_ids": [s.subject_id for s in subjects],
            "names": [s.name for s in subjects],
            "account_names": [s.account_name for s in subjects],
            "assigned_user_ids": [s.assigned_user_id for s in subjects],
            "assigned_user_names": [s.assigned_user_name for s in subjects],
            "stages": [s.stage for s in subjects],
            "crm_urls": [s.crm_url for s in subjects],
            "amounts": [s.amount for s in subjects],
            "currencies": [s.amount_currency for s in subjects],
            "cadence_name": plan.cadence_name,
            "offsets": list(plan.offsets),
            "time_zone": plan.time_zone,
            "base_on": base_on,
            "registered_at": registered_at,
            "registered_by": registered_by,
            "source_event_id": source_event_id,
            "step_nos": [step.step_no for step in steps],
            "offset_days": [step.offset_days for step in steps],
            "due_ons": [step.due_on for step in steps],
        },
    ).fetchall()
    return {str(row["subject_id"]): int(row["id"]) for row in rows}


def apply_registrations(
    conn: psycopg.Connection[Any],
    registrations: Sequence[Registration],
    *,
    subjects: Mapping[str, Subject],
    plan: Plan | Plans | None,
    at: datetime,
    registered_by: RegisteredBy,
    source_event_id: int | None = None,
    entered: Mapping[str, datetime] | None = None,
) -> dict[str, Registration]:
    """Open and close watches as decided, and the registrations as they ended, by deal: an
    ``open`` that found a watch opened meanwhile reports ``already_open``, a ``close`` of a
    watch closed meanwhile reports ``nothing_to_close``. New watches copy ``subjects`` and are
    registered when each deal entered its stage (``entered``, by deal; else ``at``), planned by
    ``plan`` (with ``Plans``, the plan of each deal's stage) from that moment, from which on
    activity counts too: one statement per moment of entry and cadence. Closes are stamped
    ``at``."""
    ended = {r.subject_id: r for r in registrations}
    closing = subjects_to_close(registrations)
    closed = close_watches(conn, closing, closed_at=at)
    for r in registrations:
        if r.action == "close" and r.watch_id not in closed:
            ended[r.subject_id] = Registration(r.subject_id, "none", "nothing_to_close")
    opening = [subjects[r.subject_id] for r in registrations if r.action == "open"]
    if opening:
        assert plan is not None, "opening watches needs a plan"
        by_moment: dict[tuple[datetime, str], tuple[Plan, list[Subject]]] = {}
        for subject in opening:
            moment = (entered or {}).get(subject.subject_id, at)
            chosen = plan.for_stage(subject.stage) if isinstance(plan, Plans) else plan
            by_moment.setdefault((moment, chosen.cadence_name), (chosen, []))[1].append(subject)
        opened: dict[str, int] = {}
        for (moment, _), (chosen, members) in by_moment.items():
            opened |= insert_watches(
                conn,
                subjects=members,
                plan=chosen,
                registered_at=moment,
                registered_by=registered_by,
                source_event_id=source_event_id,
            )
        for subject in opening:
            watch_id = opened.get(subject.subject_id)
            ended[subject.subject_id] = (
                Registration(subject.subject_id, "open", "registered", watch_id)
                if watch_id is not None
                else Registration(subject.subject_id, "none", "already_open")
            )
    return ended


def close_watch(
    conn: psycopg.Connection[Any], *, watch_id: int, reason: CloseReason, closed_at: datetime
) -> bool:
    """Close an open watch; False when it was closed already."""
    return watch_id in close_watches(conn, {watch_id: reason}, closed_at=closed_at)


def close_watches(
    conn: psycopg.Connection[Any], reasons: Mapping[int, CloseReason], *, closed_at: datetime
) -> set[int]:
    """Close open watches (id: reason) in one statement; the ids closed (not closed before)."""
    if not reasons:
        return set()
    params = {"watch_ids": list(reasons), "reasons": list(reasons.values()), "closed_at": closed_at}
    return {int(row["id"]) for row in conn.execute(query("close_watches"), params).fetchall()}


def latest_watches_of(
    conn: psycopg.Connection[Any], subject_ids: Sequence[str]
) -> dict[str, Watch]:
    """The most recent watch of each of the deals, open or closed, by deal."""
    found = fetch_all(
        conn,
        Watch,
        query("latest_watches_of_subjects"),
        {"subject_type": SUBJECT_TYPE, "subject_ids": list(subject_ids)},
    )
    return {watch.subject_id: watch for watch in found}


def watch_by_id(
    conn: psycopg.Connection[Any], watch_id: int, *, lock: bool = False
) -> Watch | None:
    """One watch (with ``lock``, locked until the transaction ends)."""
    name = "watch_by_id_locked" if lock else "watch_by_id"
    return fetch_one(conn, Watch, query(name), {"watch_id": watch_id})


def open_watch_of(conn: psycopg.Connection[Any], subject_id: str) -> Watch | None:
    """The open watch of a deal."""
    return fetch_one(
        conn,
        Watch,
        query("open_watch_of_subject"),
        {"subject_type": SUBJECT_TYPE, "subject_id": subject_id},
    )


def latest_watch_of(conn: psycopg.Connection[Any], subject_id: str) -> Watch | None:
    """The most recent watch of a deal, open or closed."""
    return fetch_one(
        conn,
        Watch,
        query("latest_watch_of_subject"),
        {"subject_type": SUBJECT_TYPE, "subject_id": subject_id},
    )


def open_watches(conn: psycopg.Connection[Any]) -> list[Watch]:
    """Every open watch, oldest first."""
    return fetch_all(conn, Watch, query("open_watches"), {})


def open_watches_of(conn: psycopg.Connection[Any], subject_ids: Sequence[str]) -> list[Watch]:
    """The open watches of the deals ``subject_ids``, oldest first."""
    return fetch_all(
        conn,
        Watch,
        query("open_watches_of_subjects"),
        {"subject_type": SUBJECT_TYPE, "subject_ids": list(subject_ids)},
    )


def oldest_open_activity_start(conn: psycopg.Connection[Any]) -> datetime | None:
    """The earliest ``active_since`` of the open watches; None when none is open."""
    row = conn.execute(query("oldest_open_activity_start")).fetchone()
    return row["since"] if row else None


def clear_open_watch_errors(conn: psycopg.Connection[Any]) -> None:
    """Clear the CRM error of every open watch holding one."""
    conn.execute(query("clear_open_watch_errors"))


def set_open_watch_errors(conn: psycopg.Connection[Any], *, error: str, at: datetime) -> set[int]:
    """Set ``error`` on every open watch, in one statement; their ids."""
    rows = conn.execute(query("set_open_watch_errors"), {"error": storable(error), "at": at})
    return {int(row["id"]) for row in rows.fetchall()}


def due_watches(conn: psycopg.Connection[Any], *, now: datetime) -> list[Watch]:
    """Open watches with an open step due by ``now``'s local date in their own zone."""
    return fetch_all(conn, Watch, query("due_watches"), {"now": now})


def quiet_watches(conn: psycopg.Connection[Any], *, now: datetime, min_days: int) -> list[Watch]:
    """Open watches whose steps are all done, the last fired ``min_days`` calendar days ago or
    more (and as long since the last reset): the candidates for ``exhausted``."""
    return fetch_all(conn, Watch, query("quiet_watches"), {"now": now, "min_days": min_days})


def count_open_watches(conn: psycopg.Connection[Any]) -> int:
    """How many watches are open."""
    row = conn.execute(query("count_open_watches")).fetchone()
    return int(row["n"]) if row else 0


def mark_reset(conn: psycopg.Connection[Any], *, watch_id: int, at: datetime) -> None:
    """Remember that activity reset the watch's cadence at ``at``."""
    conn.execute(query("mark_reset"), {"watch_id": watch_id, "reset_at": at})


def set_paused(
    conn: psycopg.Connection[Any],
    *,
    watch_id: int,
    at: datetime | None,
    until: date | None = None,
) -> bool:
    """Pause (``at``, to the day ``until`` if given) or resume (None) an open watch; False if it
    is not open."""
    params = {"watch_id": watch_id, "paused_at": at, "until": until if at else None}
    return conn.execute(query("set_paused"), params).fetchone() is not None


def pauses_ended(conn: psycopg.Connection[Any], *, now: datetime) -> list[Watch]:
    """Open watches whose pause ended by today (each in its zone)."""
    return fetch_all(conn, Watch, query("pauses_ended"), {"now": now})


def set_watch_error(
    conn: psycopg.Connection[Any], *, watch_id: int, error: str | None, at: datetime | None
) -> None:
    """Remember the CRM error that holds the watch back; None clears it."""
    text = storable(error) if error is not None else None
    conn.execute(query("set_watch_error"), {"watch_id": watch_id, "error": text, "at": at})


@dataclass(frozen=True)
class DealFacts:
    """What a watch keeps current of its deal: its names, owner, stage and amount (the morning
    lists go by the owner; a reassigned deal moves to its new owner's list)."""

    name: str
    account_name: str | None
    assigned_user_id: str | None
    assigned_user_name: str | None
    stage: str
    amount: float | None
    amount_currency: str | None


def set_facts(
    conn: psycopg.Connection[Any], facts: Mapping[int, DealFacts], *, at: datetime
) -> None:
    """Copy the CRM's current names, owner, stage and amount onto open watches (watch id:
    facts), in one statement; a deal moved to another stage enters it ``at`` (the census)."""
    conn.execute(
        query("set_watch_facts"),
        {
            "at": at,
            "watch_ids": list(facts),
            "names": [f.name for f in facts.values()],
            "account_names": [f.account_name for f in facts.values()],
            "user_ids": [f.assigned_user_id for f in facts.values()],
            "user_names": [f.assigned_user_name for f in facts.values()],
            "stages": [f.stage for f in facts.values()],
            "amounts": [f.amount for f in facts.values()],
            "currencies": [f.amount_currency for f in facts.values()],
        },
    )


def refresh_subject(
    conn: psycopg.Connection[Any], *, watch_id: int, subject: Subject, at: datetime
) -> None:
    """Copy a CRM deal's current names and stage onto its watch; clear its CRM error. A deal
    moved to another stage enters it ``at`` (the census)."""
    conn.execute(
        query("refresh_subject"),
        {
            "at": at,
            "watch_id": watch_id,
            "name": subject.name,
            "account_name": subject.account_name,
            "assigned_user_id": subject.assigned_user_id,
            "assigned_user_name": subject.assigned_user_name,
            "stage": subject.stage,
            "amount": subject.amount,
            "amount_currency": subject.amount_currency,
        },
    )


def list_watches(
    conn: psycopg.Connection[Any], *, include_closed: bool = False, limit: int = 200
) -> list[WatchListing]:
    """Watches for the operator with their next due date: the open first, each the soonest due
    first (none last), then by the deal's name."""
    params = {"all": include_closed, "limit": limit}
    return fetch_all(conn, WatchListing, query("list_watches"), params)
