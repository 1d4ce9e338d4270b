"""``followup watches list | show DEAL_ID|ID | explain DEAL_ID``; ``watch``, ``unwatch``,
``pause`` and ``resume`` are ``watch_steering.py``'s.

``list`` sorts the watches by their next due date (none last), then by the deal's name, and
names each one's owner; ``show`` takes a deal's id (its open watch, else its latest) or a watch's
number, as ``pause`` and ``resume`` do."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from followup_pipeline.clock import build_clock
from followup_pipeline.commands.watch_steering import crm_deal, find_watch, register_steering
from followup_pipeline.domain.calendar import BusinessCalendar, next_business_hour
from followup_pipeline.domain.explain import CrmAnswer, explain
from followup_pipeline.domain.localtime import for_people, local_date
from followup_pipeline.domain.text import cut_at_word
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError
from followup_pipeline.integrations.espocrm_webhooks import DEAL_ID
from followup_pipeline.machine import with_sandbox
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.db import connect, resolve_database_url
from followup_pipeline.store.enrichments import latest_summary
from followup_pipeline.store.holidays import load_calendar
from followup_pipeline.store.ledger import actions_of_watch
from followup_pipeline.store.steps import steps_of
from followup_pipeline.store.watches import latest_watch_of, list_watches

#: The width of the owner's column in ``watches list`` (a longer name is cut at a word).
OWNER_WIDTH = 20


def _list(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        rows = list_watches(conn, include_closed=args.all)
    print(
        f"{'id':>6}  {'deal':<18} {'stage':<12} {'state':<14} {'next due':<10}  "
        f"{'owner':<{OWNER_WIDTH}}  name"
    )
    for row in rows:
        state = row.closed_reason or ("paused" if row.paused_at else "open")
        due = str(row.next_due_on or "—")
        owner = cut_at_word(row.assigned_user_name or "—", OWNER_WIDTH)
        print(
            f"{row.id:>6}  {row.subject_id:<18} {row.stage:<12} {state:<14} "
            f"{due:<10}  {owner:<{OWNER_WIDTH}}  {row.subject_name}"
        )
    print(f"{len(rows)} watch(es)")
    return 0


def _show(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        watch = find_watch(conn, args.target, closed=True)
        if watch is None:
            print(f"followup: no watch of deal {args.target}, and no watch {args.target}")
            return 1
        steps = steps_of(conn, watch.id)
        actions = actions_of_watch(conn, watch.id)
        summary = latest_summary(conn, watch.subject_id)
    for key in (
        "id",
        "subject_id",
        "subject_name",
        "account_name",
        "stage",
        "registered_at",
        "registered_by",
        "base_on",
        "time_zone",
        "last_reset_at",
        "paused_at",
        "closed_at",
        "closed_reason",
        "last_error",
        "crm_url",
    ):
        value = getattr(watch, key)
        if isinstance(value, datetime):  # people read the team's local time, with its zone
            value = for_people(value, settings.timezone)
        print(f"{key:>14}: {value}")
    if summary:
        print(f"{'summary':>14}: {summary[0]}")
        print(f"{'':>14}  {summary[1]}")
    else:
        print(f"{'summary':>14}: none yet (enrich summarises deals whose e-mails changed)")
    for step in steps:
        action = actions.get(step.step_no)
        ledger = f"{action.outcome} {action.provider_ref or ''}".strip() if action else "—"
        state = (
            f"fired {for_people(step.fired_at, settings.timezone)} task {step.task_ref}"
            if step.fired_at
            else f"skipped ({step.skip_reason})"
            if step.skipped_at
            else "open"
        )
        print(f"  step {step.step_no}: due {step.due_on}  {state}  ledger: {ledger}")
    return 0


def _explain(args: argparse.Namespace, settings: Settings) -> int:
    if not DEAL_ID.fullmatch(args.deal_id):
        print(f"followup: {args.deal_id!r} is no CRM id (up to 64 of A-Z a-z 0-9 _ -)")
        return 2
    now = build_clock(settings.now).now()
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        lines = explain_deal(conn, args.deal_id, settings=settings, now=now)
        done = audit.entries(conn, subject=f"deal:{args.deal_id}", limit=20)
    print("\n".join(lines))
    if done:
        print("What operators did (newest first):")
    for entry in done:
        why = f" (why: {entry.reason})" if entry.reason else ""
        when = for_people(entry.at, settings.timezone)
        print(f"  {when}  {entry.actor}  {entry.action}: {entry.detail or ''}{why}")
    return 0


def explain_deal(conn: Any, deal_id: str, *, settings: Settings, now: datetime) -> list[str]:
    """The explanation of one deal from the store (and the CRM, for a deal with no watch)."""
    watch = latest_watch_of(conn, deal_id)
    steps = steps_of(conn, watch.id) if watch else []
    actions = actions_of_watch(conn, watch.id) if watch else {}
    crm = None
    if watch is None:
        calendar = load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)
        crm = ask_crm(with_sandbox(settings), deal_id, calendar=calendar, now=now)
    return explain(
        deal_id=deal_id,
        watch=watch,
        steps=steps,
        actions=actions,
        today=local_date(now, settings.timezone),
        watched_stages=settings.watched_stages,
        crm=crm,
    )


def ask_crm(
    settings: Settings, deal_id: str, *, calendar: BusinessCalendar, now: datetime
) -> CrmAnswer:
    """What the CRM says of a deal Followup has no watch for."""
    try:
        deal = crm_deal(settings, deal_id)
    except NotFoundError:
        return CrmAnswer(found=False)
    except (IntegrationError, ValueError) as error:
        return CrmAnswer(found=False, error=str(error))
    next_run = next_business_hour(
        now,
        calendar,
        zone=settings.timezone,
        start_hour=settings.evaluate_hours_start,
        end_hour=settings.evaluate_hours_end,
    )
    return CrmAnswer(found=True, name=deal.name, stage=deal.stage, next_evaluate=next_run)


def register(commands: Any) -> None:
    """Add ``watches`` and its sub-commands."""
    watches = commands.add_parser(
        "watches", help="list, show, explain, watch, unwatch, pause and resume watches"
    )
    sub = watches.add_subparsers(dest="watches_command", required=True)
    listing = sub.add_parser(
        "list", help="open watches (all with --all), the soonest due first, with their owner"
    )
    listing.add_argument("--all", action="store_true", help="include closed watches")
    listing.set_defaults(handler=_list)
    show = sub.add_parser("show", help="one watch with its steps and ledger")
    show.add_argument(
        "target", help="a deal's id (its open watch, else its latest) or a watch's number"
    )
    show.set_defaults(handler=_show)
    register_steering(sub)
    why = sub.add_parser("explain", help="why a deal has or has no task today")
    why.add_argument("deal_id")
    why.set_defaults(handler=_explain)
