"""``followup lms``: the learning reminders' tenants and how their reminders stand.

- ``lms status``: per tenant, reminders overdue (due and not settled), delivery failures, the
  duplicates suppressed (overtaken), opted out, completed first, expired (past the catch-up
  window unsent), sent, confirmed (read back).
- ``lms tenants``: the tenants, their zone, channel, plan and mode.
- ``lms tenant set ID --name … --moodle-url … --token-ref … --zone … [--channel email|moodle]
  [--sender ADDRESS] [--courses 3,4] [--mode off|dry|live] …``: add or change a tenant (a new
  one starts ``dry``: every reminder is recorded, none is sent, until it is set ``live``).
- ``lms queue``, ``lms content …``, ``lms certificates``: ``lms_work.py``.
- ``lms opt-in TENANT LEARNER --by NAME``: the learner wants reminders again (the opt-outs
  go, audited).
- ``lms opt-out TENANT LEARNER [--type before_due|due_day|overdue]``: the learner wants no more
  reminders (of that type).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import fields, replace
from datetime import time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import holidays

from followup_pipeline.clock import build_clock
from followup_pipeline.commands import add_by
from followup_pipeline.commands.lms_work import register_work
from followup_pipeline.domain.localtime import for_people
from followup_pipeline.machine import with_sandbox
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit, links, lms
from followup_pipeline.store.db import connect, resolve_database_url


def _status(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        now = build_clock(settings.now).now()
        rows = lms.status(conn, now, since=now - lms.STATUS_WINDOW)
    if not rows:
        print("no tenants: add one with `followup lms tenant set`")
        return 0
    print("overdue, failed and planned as they stand; the rest over the last 7 days")
    print(
        f"{'tenant':<20} {'mode':<5} {'zone':<20} {'overdue':>7} {'failed':>6} {'overtaken':>9} "
        f"{'opted out':>9} {'completed':>9} {'expired':>7} {'sent':>5} {'confirmed':>9} "
        f"{'planned':>7} {'queued':>6}"
    )
    for row in rows:
        print(
            f"{row.tenant_id:<20} {row.mode:<5} {row.time_zone:<20} {row.overdue:>7} "
            f"{row.failures:>6} {row.superseded:>9} {row.opted_out:>9} {row.completed:>9} "
            f"{row.expired:>7} {row.sent:>5} {row.confirmed:>9} {row.planned:>7} {row.queued:>6}"
        )
    print()
    for row in rows:
        print(f"{row.tenant_id}: {reach_line(row, row.time_zone)}")
    unreachable = [r for r in rows if r.unreachable_since is not None and r.mode != "off"]
    return 1 if unreachable or any(row.failures for row in rows) else 0


def reach_line(row: lms.TenantStatus | lms.Tenant, zone: str) -> str:
    """When the academy's Moodle was last reached, or since when it cannot be, and why (in
    the academy's ``zone``)."""
    last = for_people(row.reached_at, zone) if row.reached_at else "never"
    if row.unreachable_since is not None:
        since = for_people(row.unreachable_since, zone)
        return (
            f"Moodle UNREACHABLE since {since} ({row.unreachable_error}); last reached {last}; "
            "its reminders due meanwhile wait on the owner's list once late (followup work list "
            "--pipeline learning)"
        )
    if row.reached_at is None:
        return "Moodle not reached by any run yet"
    return f"Moodle last reached {last}"


def _tenants(args: argparse.Namespace, settings: Settings) -> int:
    settings = with_sandbox(settings)  # the running machine's tokens, on the sandbox its own
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        rows = lms.tenants(conn)
    for t in rows:
        token = "token set" if settings.lms_token(t.token_ref) else "NO TOKEN"
        plan = (
            f"{t.before_days}d before, due day, {t.after_business_days} business days after, "
            f"at {t.remind_at:%H:%M}"
        )
        print(
            f"{t.id}: {t.mode}, {t.time_zone}, {t.channel}"
            f"{' from ' + t.sender if t.channel == 'email' and t.sender else ''}, "
            f"courses {','.join(map(str, t.course_ids)) or '—'}; {plan}; "
            f"{t.moodle_url} ({t.token_ref}: {token})"
        )
    print(f"{len(rows)} tenant(s)")
    return 0


def _courses(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("course ids, e.g. 3,4") from None


def _zone(text: str) -> str:
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise argparse.ArgumentTypeError(f"not a time zone: {text!r}") from None
    return text


def _country(text: str) -> str:
    if text.upper() not in holidays.list_supported_countries():
        raise argparse.ArgumentTypeError(f"no holiday calendar for country {text!r}")
    return text.upper()


def _set(args: argparse.Namespace, settings: Settings) -> int:
    settings = with_sandbox(settings)
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        known = lms.tenant(conn, args.id)
        given = {
            name: value
            for name, value in vars(args).items()
            if name in FIELDS and value is not None
        }
        if known is None:
            missing = [
                OPTION.get(n, f"--{n.replace('_', '-')}") for n in REQUIRED if n not in given
            ]
            if missing:
                print(f"a new tenant needs {', '.join(missing)}")
                return 2
            tenant = lms.Tenant(id=args.id, **given)
        else:
            tenant = replace(known, **given)
        if tenant.credential_token_ref == "":
            tenant = replace(tenant, credential_token_ref=None)
        if tenant.channel == "email" and not tenant.sender:
            print("a tenant reminded by e-mail needs --sender (the mailbox they come from)")
            return 2
        with conn.transaction():
            lms.save_tenant(conn, tenant)
    print(f"tenant {tenant.id} saved: {tenant.mode}, {tenant.time_zone}, {tenant.channel}")
    if not settings.lms_token(tenant.token_ref):
        print(f"note: no token {tenant.token_ref!r} in FOLLOWUP_LMS_TOKENS yet")
    if tenant.credential_groups:
        groups = ", ".join(f"course {c} by group {g}" for c, g in tenant.credential_groups.items())
        print(f"certificates: {groups}")
        if tenant.credential_token_ref is None:
            print("note: no certificates are issued until --credential-token-ref names its key")
        elif not settings.lms_token(tenant.credential_token_ref):
            ref = tenant.credential_token_ref
            print(f"note: no credential platform key {ref!r} in FOLLOWUP_LMS_TOKENS yet")
    return 0


def _opt_out(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        if lms.tenant(conn, args.tenant) is None:
            print(f"no tenant {args.tenant!r}")
            return 2
        with conn.transaction():
            lms.opt_out(conn, args.tenant, args.learner, args.type)
            audit.record(
                conn,
                actor=args.by,
                action="lms.opt_out",
                subject=f"learner:{args.tenant}:{args.learner}",
                detail=f"no more reminders ({args.type})",
                reason=args.reason,
            )
    print(f"learner {args.learner} of {args.tenant}: no more reminders ({args.type})")
    return 0


def _opt_in(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        if lms.tenant(conn, args.tenant) is None:
            print(f"no tenant {args.tenant!r}")
            return 2
        with conn.transaction():
            removed = links.opt_in(conn, args.tenant, args.learner)
            if removed:
                audit.record(
                    conn,
                    actor=args.by,
                    action="lms.opt_in",
                    subject=f"learner:{args.tenant}:{args.learner}",
                    detail=f"reminders again (was opted out: {', '.join(sorted(removed))})",
                    reason=args.reason,
                )
    if not removed:
        print(f"learner {args.learner} of {args.tenant} had not opted out: nothing changed")
        return 1
    print(f"learner {args.learner} of {args.tenant}: reminders again")
    return 0


#: What ``tenant set`` can change, and what a new tenant needs.
FIELDS = tuple(
    f.name for f in fields(lms.Tenant) if f.name != "id" and f.name not in lms.NOT_SET_BY_HAND
)
REQUIRED = ("name", "moodle_url", "token_ref", "time_zone")
#: Options named otherwise than their field.
OPTION = {"time_zone": "--zone", "course_ids": "--courses", "remind_at": "--at"}


def _groups(text: str) -> dict[str, int]:
    """``7=9549,8=9550``: course id → credential group id (an empty text: none)."""
    try:
        pairs = [part.split("=") for part in text.split(",") if part.strip()]
        groups = {str(int(course)): int(group) for course, group in pairs}
    except ValueError:
        raise argparse.ArgumentTypeError(
            "course=group pairs, e.g. 7=9549,8=9550 (none: an empty text)"
        ) from None
    if len(groups) != len(pairs):
        raise argparse.ArgumentTypeError("each course once: a course has one credential group")
    return groups


def _ref(text: str) -> str:
    """A name in FOLLOWUP_LMS_TOKENS (an empty text: none)."""
    if text and not re.fullmatch(r"[A-Z][A-Z0-9_]{0,99}", text):
        raise argparse.ArgumentTypeError(f"a name like ACADEMY_BERLIN_CREDENTIALS, not {text!r}")
    return text


def register(commands: Any) -> None:
    """Add ``lms status``, ``lms tenants``, ``lms tenant set`` and ``lms opt-out``."""
    top = commands.add_parser("lms", help="learning reminders: tenants and their reminders")
    sub = top.add_subparsers(dest="lms_command", required=True)
    sub.add_parser("status", help="per tenant: overdue, failed, suppressed, sent").set_defaults(
        handler=_status
    )
    sub.add_parser("tenants", help="the tenants").set_defaults(handler=_tenants)
    tenant = sub.add_parser("tenant", help="add or change a tenant")
    tsub = tenant.add_subparsers(dest="tenant_command", required=True)
    setting = tsub.add_parser("set", help="add or change a tenant (a new one starts dry)")
    setting.add_argument("id")
    setting.add_argument("--name")
    setting.add_argument("--moodle-url", dest="moodle_url")
    setting.add_argument("--token-ref", dest="token_ref", help="its name in FOLLOWUP_LMS_TOKENS")
    setting.add_argument("--zone", dest="time_zone", type=_zone)
    setting.add_argument("--holiday-country", dest="holiday_country", type=_country)
    setting.add_argument("--holiday-subdivision", dest="holiday_subdivision")
    setting.add_argument("--channel", choices=("email", "moodle"))
    setting.add_argument("--sender", help="the mailbox e-mail reminders come from")
    setting.add_argument("--courses", dest="course_ids", type=_courses)
    setting.add_argument("--before-days", dest="before_days", type=int)
    setting.add_argument("--after-business-days", dest="after_business_days", type=int)
    setting.add_argument("--at", dest="remind_at", type=time.fromisoformat)
    setting.add_argument("--hours-start", dest="hours_start", type=int)
    setting.add_argument("--hours-end", dest="hours_end", type=int)
    setting.add_argument("--mode", choices=("off", "dry", "live"))
    setting.add_argument(
        "--language",
        choices=("de", "en"),
        help="what its learners and owner read, unless a learner's own is set",
    )
    setting.add_argument("--owner")
    setting.add_argument("--backup")
    setting.add_argument(
        "--credential-token-ref",
        dest="credential_token_ref",
        type=_ref,
        help="the name of its credential platform key in FOLLOWUP_LMS_TOKENS",
    )
    setting.add_argument(
        "--certificate-groups",
        dest="credential_groups",
        type=_groups,
        help="which credential group certifies each course: 7=9549,8=9550",
    )
    setting.set_defaults(handler=_set)
    out = sub.add_parser("opt-out", help="a learner wants no more reminders")
    out.add_argument("tenant")
    out.add_argument("learner", type=int)
    out.add_argument("--type", default="all", choices=("all", "before_due", "due_day", "overdue"))
    add_by(out)
    out.add_argument("--reason", help="why (kept in the audit)")
    out.set_defaults(handler=_opt_out)
    back = sub.add_parser("opt-in", help="a learner who opted out wants reminders again")
    back.add_argument("tenant")
    back.add_argument("learner", type=int)
    add_by(back)
    back.add_argument("--reason", help="why (kept in the audit)")
    back.set_defaults(handler=_opt_in)
    register_work(sub)
