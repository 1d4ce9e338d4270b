"""``followup account [--since DAY] [--pipeline NAME]``: every action due in a window and how
each ended (docs/architecture.md §13, docs/operations.md "The account of due actions"): done,
suppressed with its reason, waiting on the list of work with its owner, in flight, not late yet,
or unaccounted. Exit status 1 when anything is unaccounted, with each named.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from followup_pipeline.clock import build_clock
from followup_pipeline.domain.account import ENDINGS, GRACE, Account
from followup_pipeline.domain.work import PIPELINES, parse_since
from followup_pipeline.engine.account import account
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import connect, resolve_database_url, translated_errors

#: The window when ``--since`` is not given.
DEFAULT_WINDOW = timedelta(days=7)
#: Exit status of a malformed request.
USAGE = 2
#: Unaccounted actions named at most (the rest counted).
NAMED = 50


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:g} h"


def render(result: Account, zone: str) -> str:
    """The account as text: a table of endings per pipeline and kind, what was suppressed why,
    who has what waiting, and each unaccounted action by name."""
    local = ZoneInfo(zone)
    lines = [
        f"Due from {result.since.astimezone(local):%Y-%m-%d %H:%M} to "
        f"{result.until.astimezone(local):%Y-%m-%d %H:%M} ({zone})",
        "",
    ]
    header = ("pipeline", "kind", "due", *[e.replace("_", " ") for e in ENDINGS])
    rows = [
        (line.pipeline, line.kind, str(line.due), *[str(line.endings[e]) for e in ENDINGS])
        for line in result.sorted_lines()
    ]
    if not rows:
        return "\n".join([*lines, "nothing was due in this window"])
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        cells = [c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    for line in result.sorted_lines():
        if line.suppressed:
            why = ", ".join(f"{reason} {n}" for reason, n in sorted(line.suppressed.items()))
            lines.append(f"suppressed, {line.pipeline} {line.kind}: {why}")
        if line.waiting:
            who = ", ".join(f"{owner} {n}" for owner, n in sorted(line.waiting.items()))
            lines.append(f"waiting, {line.pipeline} {line.kind}: {who}")
    if result.unaccounted:
        lines += ["", f"unaccounted ({len(result.unaccounted)}): due, past its grace, and "
                  "neither done, suppressed, waiting with an owner nor in flight"]  # fmt: skip
        for entry in result.unaccounted[:NAMED]:
            due = entry.due_at.astimezone(local)
            lines.append(
                f"  {entry.pipeline} {entry.kind} {entry.name}: due {due:%Y-%m-%d %H:%M}, "
                f"grace {_hours(GRACE[entry.kind])}"
            )
        if len(result.unaccounted) > NAMED:
            lines.append(f"  and {len(result.unaccounted) - NAMED} more")
    else:
        lines += ["", "unaccounted: 0"]
    return "\n".join(lines)


def _account(args: argparse.Namespace, settings: Settings) -> int:
    now = build_clock(settings.now).now()
    try:
        since = (
            parse_since(args.since, zone=settings.timezone, now=now)
            if args.since
            else now - DEFAULT_WINDOW
        )
    except ValueError as error:
        print(f"followup: {error}", file=sys.stderr)
        return USAGE
    if since > now:
        print(f"followup: --since {args.since} is in the future", file=sys.stderr)
        return USAGE
    with translated_errors(), connect(resolve_database_url(settings), autocommit=True) as conn:
        result = account(conn, settings, since=since, until=now, pipeline=args.pipeline)
    print(render(result, settings.timezone))
    return 1 if result.unaccounted else 0


def register(commands: Any) -> None:
    """Add ``account``."""
    parser = commands.add_parser(
        "account", help="every action due in a window and how it ended; fails on unaccounted"
    )
    parser.add_argument(
        "--since", help="from: today, yesterday, 6h, 2d, 2026-12-03 (default: 7 days ago)"
    )
    parser.add_argument("--pipeline", choices=PIPELINES)
    parser.set_defaults(handler=_account)
