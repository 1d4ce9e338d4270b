"""``followup leads mode``, ``followup leads go-live`` and ``followup leads shadow``: lead intake's
mode (``store/lead_mode.py``), shown and switched on purpose.

Going live shows the mode on record and the last ``followup leads compare``'s summary (none on
record refuses, unless ``--without-compare``), then asks for the word ``live`` (``--yes`` answers
for a script); both switches are audited with who and why. Each CRM write reads the mode as it
goes, so the next write works in the new mode, a run in flight included: nothing needs a restart.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from followup_pipeline.domain.localtime import for_people
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit, lead_mode
from followup_pipeline.store.db import connect, resolve_database_url

#: The word that confirms going live.
CONFIRM = "live"


def _state(settings: Settings) -> lead_mode.InForce:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        return lead_mode.in_force(conn, settings)


def describe(mode: lead_mode.InForce, settings: Settings) -> str:
    """The mode in one line: which, since when, by whom (and a dry run's hold)."""
    record = mode.record
    since = for_people(record.changed_at, settings.timezone)
    line = f"lead intake: {mode.mode} (since {since}, by {record.changed_by})"
    if mode.mode != record.mode:
        line += f"; FOLLOWUP_DRY_RUN keeps it in shadow (on record: {record.mode})"
    return line


def _mode(args: argparse.Namespace, settings: Settings) -> int:
    print(describe(_state(settings), settings))
    return 0


def _comparison_line(settings: Settings) -> str | None:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        last = lead_mode.last_comparison(conn)
    if last is None:
        return None
    when = for_people(last.at, settings.timezone)
    return f"the last comparison, {when} by {last.actor}: {last.detail}"


def _confirmed() -> bool:
    """The word ``live`` typed at the prompt (anything else, or no one there, is a no)."""
    if not sys.stdin.isatty():
        print("not switched: confirm with --yes when no one can answer here")
        return False
    try:
        answer = input(f'Type "{CONFIRM}" to go live: ').strip()
    except EOFError:
        answer = ""
    if answer != CONFIRM:
        print("not switched")
        return False
    return True


def _go_live(args: argparse.Namespace, settings: Settings) -> int:
    mode = _state(settings)
    print(describe(mode, settings))
    if mode.record.mode == "live":
        print("lead intake is live already: nothing to switch")
        return 0
    comparison = _comparison_line(settings)
    if comparison is None and not args.without_compare:
        print(
            "not switched: no `followup leads compare` on record; compare what lead intake would "
            "write with the CRM first (or go live with --without-compare)"
        )
        return 1
    print(comparison or "no `followup leads compare` on record (--without-compare)")
    print(
        "Going live writes each lead to the CRM from the next write of lead_intake on; "
        "`followup leads shadow` switches back."
    )
    if not args.yes and not _confirmed():
        return 1
    with connect(resolve_database_url(settings)) as conn, conn.transaction():
        before = lead_mode.switch(
            conn,
            "live",
            by=args.by,
            settings=settings,
            reason=args.reason,
            detail=comparison or "without a comparison on record",
        )
    if before is None:
        print("lead intake was switched live meanwhile: nothing to switch")
    print(describe(_state(settings), settings))
    return 0


def _shadow(args: argparse.Namespace, settings: Settings) -> int:
    mode = _state(settings)
    if mode.record.mode == "shadow":
        print(describe(mode, settings))
        print("lead intake is in shadow already: nothing to switch")
        return 0
    with connect(resolve_database_url(settings)) as conn, conn.transaction():
        before = lead_mode.switch(conn, "shadow", by=args.by, settings=settings, reason=args.reason)
    if before is None:
        print("lead intake was switched to shadow meanwhile: nothing to switch")
    print(describe(_state(settings), settings))
    return 0


def register(sub: Any) -> None:
    """Add ``mode``, ``go-live`` and ``shadow`` to the ``leads`` sub-commands."""
    shown = sub.add_parser("mode", help="lead intake's mode: shadow or live, since when, by whom")
    shown.set_defaults(handler=_mode)
    live = sub.add_parser(
        "go-live", help="write leads to the CRM from the next write on (shows the last compare)"
    )
    live.add_argument("--yes", action="store_true", help="confirm without asking")
    live.add_argument(
        "--without-compare",
        action="store_true",
        help="go live though no `followup leads compare` is on record",
    )
    shadow = sub.add_parser(
        "shadow", help="stop writing leads to the CRM from the next write on: record them only"
    )
    for parser in (live, shadow):
        parser.add_argument(
            "--by", type=audit.actor, default=audit.os_user(), help="who does it (default: you)"
        )
        parser.add_argument("--reason", help="why (kept in the audit)")
    live.set_defaults(handler=_go_live)
    shadow.set_defaults(handler=_shadow)
