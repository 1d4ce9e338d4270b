"""``followup holidays list|add|remove`` and ``followup cadences list|set``: the business calendar's
local corrections and the named cadences, changed by an operator (``--by``, default the OS user)
and recorded in the audit (``followup audit list``).

- ``holidays add DAY --name NAME [--workday]``: a company day off, or with ``--workday`` a public
  holiday the company works; ``holidays remove DAY``. A change applies to what is planned or
  counted after it (a resumed watch, a new one, the next business-day check).
- ``cadences set NAME 5,12,21``: define a cadence; plans made after the change use it, those made
  before keep their offsets.
"""

from __future__ import annotations

import argparse
from datetime import date
from typing import Any

from followup_pipeline.clock import build_clock
from followup_pipeline.domain.cadence import validate_offsets
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit, cadences, holidays
from followup_pipeline.store.db import connect, resolve_database_url


def day_of(text: str) -> date:
    """A day as an option gives it (``2026-12-24``)."""
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a day: {text!r} (e.g. 2026-12-24)") from None


def _offsets(text: str) -> tuple[int, ...]:
    try:
        return validate_offsets([int(part) for part in text.split(",") if part.strip()])
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r}: business days after the stage change, e.g. 5,12,21 ({error})"
        ) from None


def _holidays_list(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        rows = holidays.overrides(conn)
    where = settings.holiday_country + (
        f"-{settings.holiday_subdivision}" if settings.holiday_subdivision else ""
    )
    print(f"public holidays of {where} (the holidays package), corrected by:")
    for row in rows:
        what = "day off" if row.kind == "holiday" else "worked (a public holiday)"
        print(f"  {row.day} {row.day:%a}  {what:<26} {row.name}")
    print(f"{len(rows)} correction(s)")
    return 0


def _holidays_add(args: argparse.Namespace, settings: Settings) -> int:
    kind = "workday" if args.workday else "holiday"
    today = local_date(build_clock(settings.now).now(), settings.timezone)
    if args.day < today:
        print(
            f"followup: {args.day} has passed: a correction changes what is planned or checked "
            "from now on"
        )
        return 2
    with connect(resolve_database_url(settings), autocommit=True) as conn, conn.transaction():
        new = holidays.put_override(conn, args.day, kind, args.name)
        audit.record(
            conn,
            actor=args.by,
            action="holiday.add",
            subject=f"holiday:{args.day}",
            detail=f"{kind}: {args.name}" + ("" if new else " (changed)"),
            reason=args.reason,
        )
    what = "a working day" if args.workday else "a day off"
    print(f"{args.day} is {what} from now on: {args.name}")
    return 0


def _holidays_remove(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn, conn.transaction():
        gone = holidays.remove_override(conn, args.day)
        if gone is None:
            print(f"no correction on {args.day} (`followup holidays list`)")
            return 2
        audit.record(
            conn,
            actor=args.by,
            action="holiday.remove",
            subject=f"holiday:{args.day}",
            detail=f"{gone[0]}: {gone[1]}",
            reason=args.reason,
        )
    print(f"{args.day}: the correction ({gone[1]}) is removed; the public calendar decides")
    return 0


def _cadences_list(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        rows = cadences.cadences(conn)
    for name, offsets in rows.items():
        used = " (plans new watches)" if name == settings.cadence_name else ""
        print(f"{name}: business days {', '.join(map(str, offsets))}{used}")
    return 0


def _cadences_set(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn, conn.transaction():
        before = cadences.cadences(conn).get(args.name)
        cadences.set_cadence(conn, args.name, args.offsets)
        audit.record(
            conn,
            actor=args.by,
            action="cadence.set",
            subject=f"cadence:{args.name}",
            detail=f"{list(before) if before else 'new'} -> {list(args.offsets)}",
            reason=args.reason,
        )
    print(
        f"cadence {args.name}: business days {', '.join(map(str, args.offsets))}; plans made "
        "from now on use it, those made before keep theirs"
    )
    if args.name == settings.cadence_name and settings.configured_cadence() is not None:
        print(
            "note: FOLLOWUP_CADENCE is set and writes this cadence again at the next start: "
            "unset it to keep this change"
        )
    return 0


def _operator(parser: Any) -> None:
    parser.add_argument(
        "--by", type=audit.actor, default=audit.os_user(), help="who does it (default: you)"
    )
    parser.add_argument("--reason", help="why (kept in the audit)")


def register(commands: Any) -> None:
    """Add ``holidays`` and ``cadences``."""
    days = commands.add_parser("holidays", help="company days off and holidays worked")
    dsub = days.add_subparsers(dest="holidays_command", required=True)
    dsub.add_parser("list", help="the corrections of the calendar").set_defaults(
        handler=_holidays_list
    )
    add = dsub.add_parser("add", help="a company day off (or, --workday, a holiday worked)")
    add.add_argument("day", type=day_of)
    add.add_argument("--name", required=True, help="what the day is, e.g. 'Christmas Eve'")
    add.add_argument("--workday", action="store_true", help="a public holiday that is worked")
    _operator(add)
    add.set_defaults(handler=_holidays_add)
    remove = dsub.add_parser("remove", help="remove a correction")
    remove.add_argument("day", type=day_of)
    _operator(remove)
    remove.set_defaults(handler=_holidays_remove)
    steps = commands.add_parser("cadences", help="the named cadences of follow-up steps")
    csub = steps.add_subparsers(dest="cadences_command", required=True)
    csub.add_parser("list", help="every cadence").set_defaults(handler=_cadences_list)
    setting = csub.add_parser("set", help="define a cadence: NAME 5,12,21")
    setting.add_argument("name")
    setting.add_argument("offsets", type=_offsets)
    _operator(setting)
    setting.set_defaults(handler=_cadences_set)
