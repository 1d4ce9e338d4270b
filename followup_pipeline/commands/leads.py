"""``followup leads list [--limit N]``: the leads the intake has taken in, one per person, with
how many source events brought each and from where, the intent and priority of the newest
classified one (what the CRM's Lead shows), and the CRM Lead's id.

``followup leads show ID``: one lead, its source events (oldest first) and each one's
classification.

``followup leads compare --since DATE``: per lead, what the pipeline wrote to the CRM or, in
shadow mode, would have written, beside what the CRM's Lead holds now (read by e-mail address):
the side-by-side check before the switch from the old automation; its summary is kept (the
audit, subject ``lead-intake``) for ``followup leads go-live`` to show.

``followup leads mode | go-live | shadow``: lead intake's mode, shown and switched
(``lead_switch.py``)."""

from __future__ import annotations

import argparse
from datetime import date, datetime, time
from typing import Any
from zoneinfo import ZoneInfo

from followup_pipeline.commands import lead_switch
from followup_pipeline.domain.crm_lead import differences
from followup_pipeline.domain.localtime import for_people
from followup_pipeline.domain.text import clean_text, cut_at_word
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.espocrm_leads import EspoLeadWriter
from followup_pipeline.machine import with_sandbox
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit, lead_mode
from followup_pipeline.store.db import connect, resolve_database_url
from followup_pipeline.store.lead_crm import CrmWrite, crm_writes_since
from followup_pipeline.store.lead_enrichment import StoredClassification, classifications_of
from followup_pipeline.store.leads import LeadEvent, lead_detail, lead_events_of, list_leads

#: CRM writes read at most by one comparison (newest first).
COMPARE_LIMIT = 5000
#: How much of an event's message ``show`` prints (cut at a word).
MESSAGE_LIMIT = 300
#: What each outcome of a CRM write means in the comparison.
DONE = {
    "accepted": "written",
    "confirmed": "written",
    "suppressed": "shadow: not written",
    "failed": "failed",
    "unknown": "answer lost",
    "attempted": "in flight",
}


def _list(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        rows = list_leads(conn, limit=args.limit)
    print(
        f"{'id':>6}  {'e-mail':<32} {'events':>6}  {'sources':<29} {'intent':<11} {'prio':>4}  "
        f"{'CRM id':<18} {'last seen':<21} name"
    )
    for row in rows:
        who = " — ".join(_plain(part) for part in (row.name, row.company) if part) or "—"
        priority = "—" if row.priority is None else str(row.priority)
        print(
            f"{row.id:>6}  {_plain(row.email):<32} {row.events:>6}  {_plain(row.sources):<29} "
            f"{_plain(row.intent or '—'):<11} {priority:>4}  {_plain(row.crm_lead_id or '—'):<18} "
            f"{for_people(row.last_seen_at, settings.timezone):<21} {who}"
        )
    print(f"{len(rows)} lead(s)")
    return 0


def _plain(text: object) -> str:
    """Outside text (a person's, the CRM's, the model's) as one plain line: no control
    characters, so no escape sequence reaches the terminal."""
    return " ".join(clean_text(str(text)).split())


def _when(value: datetime | None, settings: Settings) -> str:
    return "—" if value is None else for_people(value, settings.timezone)


def _event_lines(event: LeadEvent, settings: Settings) -> list[str]:
    """An event in a line, and its message under it."""
    facts = [f"event {event.event_id}", _plain(event.source), _plain(event.kind)]
    if event.amount is not None:
        minor = " (minor units)" if event.amount_unit == "minor" else ""
        facts.append(f"amount {event.amount} {_plain(event.currency or '')}".rstrip() + minor)
    if event.page:
        facts.append(f"page {_plain(event.page)}")
    if event.crm_lead_id:
        facts.append(f"CRM Lead {_plain(event.crm_lead_id)}")
    lines = [f"  {_when(event.received_at, settings)}  " + ", ".join(facts)]
    if event.message:  # one line, without control characters
        message = " ".join(clean_text(event.message).split())
        lines.append(f"      message: {cut_at_word(message, MESSAGE_LIMIT)}")
    return lines


def _classification_lines(c: StoredClassification, settings: Settings) -> list[str]:
    by = "review" if c.source == "review" else f"model {c.model}"
    changed = ", the model's own answer differed" if c.model_differed else ""
    return [
        f"      classified: priority {c.priority}, intent {_plain(c.intent)}, segment "
        f"{_plain(c.segment)}, language {_plain(c.language)} (by {_plain(by)}{changed}, "
        f"{_when(c.created_at, settings)})",
        f"      summary: {_plain(c.summary)}",
        *(f"      - {_plain(reason)}" for reason in c.reasons),
    ]


def _show_lead(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        lead = lead_detail(conn, args.lead_id)
        if lead is None:
            print(f"followup: no lead {args.lead_id} (`followup leads list`)")
            return 1
        events = lead_events_of(conn, lead.id)
        classified = classifications_of(conn, lead.id)
    consent = {True: "yes", False: "no", None: "—"}[lead.consent]
    if lead.consent_at is not None:
        consent += f" (as of {_when(lead.consent_at, settings)})"
    written = f" (written {_when(lead.crm_written_at, settings)})" if lead.crm_written_at else ""
    for label, value in (
        ("lead", f"{lead.id}: {lead.email}"),
        ("name", lead.name or "—"),
        ("company", lead.company or "—"),
        ("domain", lead.company_domain or "—"),
        ("phone", lead.phone or "—"),
        ("consent", consent),
        ("first seen", f"{_when(lead.first_seen_at, settings)} by {lead.first_source}"),
        ("last seen", _when(lead.last_seen_at, settings)),
        ("CRM Lead", (lead.crm_lead_id or "none yet") + written),
    ):
        print(f"{label:>12}: {_plain(value)}")
    by_event: dict[int, list[StoredClassification]] = {}
    for c in classified:
        by_event.setdefault(c.event_id, []).append(c)
    print(f"{len(events)} event(s), oldest first:")
    for event in events:
        print("\n".join(_event_lines(event, settings)))
        found = by_event.get(event.event_id, [])
        for c in found:
            print("\n".join(_classification_lines(c, settings)))
        if not found:
            print("      not classified")
    return 0


def _show(value: Any) -> str:
    return "—" if value is None or value == "" else repr(value)


def _latest_per_lead(writes: list[CrmWrite]) -> list[CrmWrite]:
    """The newest write of each lead (``writes`` are newest first)."""
    seen: dict[int, CrmWrite] = {}
    for write in writes:
        seen.setdefault(write.lead_id, write)
    return list(seen.values())


def _compare(args: argparse.Namespace, settings: Settings) -> int:
    settings = with_sandbox(settings)  # the CRM the running machine writes to
    since = datetime.combine(args.since, time(0), ZoneInfo(settings.timezone))
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        listed = crm_writes_since(conn, since, limit=COMPARE_LIMIT)
    writes = _latest_per_lead(listed)
    key, secret = settings.espocrm_api_key, settings.espocrm_hmac_secret
    crm = EspoLeadWriter(
        str(settings.espocrm_url),
        key.get_secret_value() if key else "",
        secret.get_secret_value() if secret else None,
        timeouts=settings.vendor_timeouts(),
        custom_fields=tuple(settings.lead_crm_fields.values()),
    )
    same = differ = unread = 0
    try:
        for write in writes:
            # Everything the Lead should hold (an update sends only what differs).
            would = write.payload.get("wanted", write.payload.get("attributes"))
            op = write.payload.get("op", "?")
            state = DONE.get(write.outcome, write.outcome)
            print(
                f"{write.email}: {op} ({state}, {for_people(write.created_at, settings.timezone)})"
            )
            try:
                # The Lead written (or found), else the oldest of the address.
                ref = write.provider_ref or write.payload.get("crm_lead_id")
                now = crm.read(str(ref)) if ref else None
                if now is None:
                    found = crm.find_by_email(write.email)
                    now = found[0] if found else None
            except (IntegrationError, ValueError) as error:
                unread += 1
                print(f"    the CRM cannot be read now: {error}")
                continue
            if now is None:
                differ += 1
                print("    the CRM has no Lead of this address")
                continue
            diffs = differences(would if isinstance(would, dict) else {}, now.attributes)
            if not diffs:
                same += 1
                print("    the CRM holds what the pipeline " + (
                    "wrote" if write.outcome in ("accepted", "confirmed") else "would write"
                ))  # fmt: skip
                continue
            differ += 1
            for attribute, ours, theirs in diffs:
                print(f"    {attribute}: pipeline {_show(ours)}, CRM {_show(theirs)}")
    finally:
        crm.close()
    summary = (
        f"{len(writes)} lead(s) since {args.since}: {same} as the pipeline has it, "
        f"{differ} different, {unread} unread"
    )
    print(summary)
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        mode = lead_mode.in_force(conn, settings).mode
        lead_mode.record_comparison(conn, by=args.by, summary=f"{summary} (in {mode})")
    if len(listed) >= COMPARE_LIMIT:
        print(f"only the newest {COMPARE_LIMIT} writes were read: compare a later --since too")
    return 1 if unread else 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("a number of leads, at least 1")
    return value


def register(commands: Any) -> None:
    """Add ``leads list``, ``leads show``, ``leads compare`` and the mode's commands
    (``lead_switch.py``)."""
    leads = commands.add_parser("leads", help="the leads taken in (one per person)")
    sub = leads.add_subparsers(dest="leads_command", required=True)
    listing = sub.add_parser(
        "list", help="the leads, newest first, with their events, intent, priority and CRM id"
    )
    listing.add_argument(
        "--limit", type=_positive, default=200, help="at most this many (default 200)"
    )
    listing.set_defaults(handler=_list)
    show = sub.add_parser("show", help="one lead with its events and their classifications")
    show.add_argument("lead_id", type=int, metavar="ID", help="the lead's number (leads list)")
    show.set_defaults(handler=_show_lead)
    compare = sub.add_parser(
        "compare",
        help="what the pipeline wrote or would write (shadow) beside the CRM's Lead now",
    )
    compare.add_argument(
        "--since",
        type=date.fromisoformat,
        required=True,
        help="the first day (YYYY-MM-DD, the team's time zone)",
    )
    compare.add_argument(
        "--by", type=audit.actor, default=audit.os_user(), help="who compares (default: you)"
    )
    compare.set_defaults(handler=_compare)
    lead_switch.register(sub)
