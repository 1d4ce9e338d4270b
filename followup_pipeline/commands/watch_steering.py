"""``followup watches watch DEAL | unwatch DEAL --reason | pause TARGET [--until DAY] | resume
TARGET``: an operator steers which deals are followed up, each through the same rules as
``register`` (``domain/registration.py``), with their name (``--by``, default the OS user) in the
audit.

- ``watch DEAL``: follow up a deal the stages would not catch (its watch is ``registered_by``
  ``operator``, kept in any stage until the deal is won, lost or gone); planned from today with
  the cadence that plans new watches.
- ``unwatch DEAL --reason WHY``: close its watch ``unwatched``; no new watch while the deal stays
  in that stage (like ``exhausted``).
- ``pause TARGET [--until DAY]`` and ``resume TARGET``: TARGET is a deal's id (its open watch)
  or a watch's number; a pause with ``--until`` ends by itself on that day (the first evaluate
  run of the day resumes it). A resume plans the open steps again from today and prints each
  one's new due date (and the old one, where it moved).

``find_watch`` is how every ``watches`` command that names one watch reads its argument.
"""

from __future__ import annotations

import argparse
from datetime import date, datetime
from typing import Any

import psycopg

from followup_pipeline.clock import build_clock
from followup_pipeline.commands.calendar import day_of
from followup_pipeline.domain.cadence import PlannedStep
from followup_pipeline.domain.registration import Registration
from followup_pipeline.integrations.errors import IntegrationError, NotFoundError
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.integrations.espocrm_models import Deal
from followup_pipeline.integrations.espocrm_webhooks import DEAL_ID
from followup_pipeline.machine import with_sandbox
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.cadences import UnknownCadence, cadences, load_plan, load_plans
from followup_pipeline.store.db import connect, resolve_database_url
from followup_pipeline.store.holidays import load_calendar
from followup_pipeline.store.steps import steps_of
from followup_pipeline.store.watch_control import (
    WatchControlError,
    pause_watch,
    resume_watch,
    unwatch,
)
from followup_pipeline.store.watches import (
    Watch,
    apply_registrations,
    latest_watch_of,
    open_watch_of,
    watch_by_id,
)


def _deal_id(text: str) -> str:
    if not DEAL_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is no CRM id (up to 64 of A-Z a-z 0-9 _ -)")
    return text


def crm_deal(settings: Settings, deal_id: str) -> Deal:
    """The deal as the CRM of ``settings`` has it now (``NotFoundError`` when it has none)."""
    key, hmac = settings.espocrm_api_key, settings.espocrm_hmac_secret
    client = EspoCrmClient(
        str(settings.espocrm_url),
        key.get_secret_value() if key else "",
        hmac.get_secret_value() if hmac else None,
        timeouts=settings.vendor_timeouts(),
    )
    try:
        return client.get_deal(deal_id=deal_id)
    finally:
        client.close()


def _watch(args: argparse.Namespace, settings: Settings) -> int:
    now = build_clock(settings.now).now()
    try:
        deal = crm_deal(with_sandbox(settings), args.deal_id)
    except NotFoundError:
        print(f"followup: the CRM has no deal {args.deal_id}")
        return 2
    except (IntegrationError, ValueError) as error:
        print(f"followup: the CRM cannot be asked now: {error}")
        return 1
    if deal.stage in (settings.won_stage, settings.lost_stage):
        print(f"followup: deal {deal.id} is closed ({deal.stage}): there is nothing to follow up")
        return 1
    with connect(resolve_database_url(settings), autocommit=True) as conn, conn.transaction():
        latest = latest_watch_of(conn, deal.id)
        if latest is not None and latest.closed_at is None:
            print(f"deal {deal.id} is followed up already (watch {latest.id})")
            return 1
        calendar = load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)
        if args.cadence is not None:
            try:
                plan = load_plan(
                    conn, cadence_name=args.cadence, time_zone=settings.timezone, calendar=calendar
                )
            except UnknownCadence:
                known = ", ".join(cadences(conn)) or "none"
                print(f"followup: no cadence {args.cadence!r} (cadences: {known})")
                return 2
        else:
            plan = load_plans(conn, settings, calendar=calendar).for_stage(deal.stage)
        decided = Registration(deal.id, "open", "registered")
        ended = apply_registrations(
            conn,
            [decided],
            subjects={deal.id: deal.subject(settings.crm_deal_url(deal.id))},
            plan=plan,
            at=now,
            registered_by="operator",
        )
        watch = open_watch_of(conn, deal.id)
        if ended[deal.id].outcome != "registered" or watch is None:
            print(f"deal {deal.id}: {ended[deal.id].outcome}")
            return 1
        steps = ", ".join(f"step {s.step_no} on {s.due_on}" for s in plan.steps_from(watch.base_on))
        audit.record(
            conn,
            actor=args.by,
            action="watch.watch",
            subject=f"deal:{deal.id}",
            detail=f"watch {watch.id} opened in stage {deal.stage}: {steps}",
            reason=args.reason,
        )
    print(f"deal {deal.id} ({deal.name}, {deal.stage}) is followed up: watch {watch.id}, {steps}")
    return 0


def _unwatch(args: argparse.Namespace, settings: Settings) -> int:
    now = build_clock(settings.now).now()
    with connect(resolve_database_url(settings), autocommit=True) as conn, conn.transaction():
        watch = open_watch_of(conn, args.deal_id)
        if watch is None:
            print(f"followup: deal {args.deal_id} has no open watch (`followup watches list`)")
            return 1
        unwatch(conn, watch_id=watch.id, now=now)
        audit.record(
            conn,
            actor=args.by,
            action="watch.unwatch",
            subject=f"deal:{watch.subject_id}",
            detail=f"watch {watch.id} closed unwatched in stage {watch.stage}",
            reason=args.reason,
        )
    print(
        f"deal {args.deal_id} is no longer followed up (watch {watch.id}); it is not followed up "
        f"again while it stays in {watch.stage}"
    )
    return 0


def find_watch(conn: psycopg.Connection[Any], text: str, *, closed: bool = False) -> Watch | None:
    """The watch an operator names: the open watch of the deal whose CRM id is ``text`` (with
    ``closed``, else its latest watch), else the watch numbered ``text``. A deal's id wins over
    a watch's number (a CRM id may be all digits)."""
    watch = open_watch_of(conn, text)
    if watch is None and closed:
        watch = latest_watch_of(conn, text)
    if watch is None and text.isdigit():
        watch = watch_by_id(conn, int(text))
    return watch


def _was(step: PlannedStep, before: dict[int, date]) -> str:
    """`` (was D)`` when the step was due on another day ``D`` before (else nothing)."""
    old = before.get(step.step_no)
    return f" (was {old})" if old is not None and old != step.due_on else ""


def _resumed(watch_id: int, planned: list[PlannedStep], before: dict[int, date]) -> list[str]:
    """What a resume did, for people: each open step's new due date, and the old one when it
    moved."""
    if not planned:
        return [f"watch {watch_id} resumed: no step left"]
    lines = [f"watch {watch_id} resumed; its open steps are due:"]
    for step in planned:
        lines.append(f"  step {step.step_no}: {step.due_on}{_was(step, before) or ' (unchanged)'}")
    return lines


def _control(args: argparse.Namespace, settings: Settings) -> int:
    now: datetime = build_clock(settings.now).now()
    with connect(resolve_database_url(settings), autocommit=True) as conn, conn.transaction():
        watch = find_watch(conn, args.target)
        if watch is None:
            print(f"followup: no open watch of deal {args.target}, and no watch {args.target}")
            return 1
        try:
            if args.command_name == "pause":
                pause_watch(conn, watch_id=watch.id, now=now, until=args.until)
                ends = f" until {args.until}" if args.until else " until resumed"
                detail = f"watch {watch.id} paused{ends}"
                said = [detail]
            else:
                calendar = load_calendar(
                    conn, settings.holiday_country, settings.holiday_subdivision
                )
                watch_by_id(conn, watch.id, lock=True)  # the dates read are the ones replanned
                before = {s.step_no: s.due_on for s in steps_of(conn, watch.id)}
                planned = resume_watch(conn, watch_id=watch.id, now=now, calendar=calendar)
                said = _resumed(watch.id, planned, before)
                dates = ", ".join(
                    f"step {p.step_no} on {p.due_on}{_was(p, before)}" for p in planned
                )
                detail = f"watch {watch.id} resumed: {dates or 'no step left'}"
        except WatchControlError as error:
            print(f"followup: {error}")
            return 1
        audit.record(
            conn,
            actor=args.by,
            action=f"watch.{args.command_name}",
            subject=f"deal:{watch.subject_id}",
            detail=detail,
            reason=args.reason,
        )
    print("\n".join(said))
    return 0


def _operator(parser: Any, *, reason_required: bool = False) -> None:
    parser.add_argument(
        "--by", type=audit.actor, default=audit.os_user(), help="who does it (default: you)"
    )
    parser.add_argument("--reason", required=reason_required, help="why (kept in the audit)")


def register_steering(sub: Any) -> None:
    """Add ``watches watch``, ``unwatch``, ``pause`` and ``resume``."""
    watch = sub.add_parser("watch", help="follow up a deal the stages would not catch")
    watch.add_argument("deal_id", type=_deal_id)
    watch.add_argument("--cadence", help="the cadence that plans it (default: its stage's)")
    _operator(watch)
    watch.set_defaults(handler=_watch)
    stop = sub.add_parser("unwatch", help="stop following up a deal (while it stays in its stage)")
    stop.add_argument("deal_id", type=_deal_id)
    _operator(stop, reason_required=True)
    stop.set_defaults(handler=_unwatch)
    for name in ("pause", "resume"):
        control = sub.add_parser(name, help=f"{name} a watch (a deal's id, or a watch's number)")
        control.add_argument("target", help="a deal's id or a watch's number")
        if name == "pause":
            control.add_argument("--until", type=day_of, help="the day it resumes by itself")
        _operator(control)
        control.set_defaults(handler=_control, command_name=name)
