"""``followup alerts list [--all]``: recent alerts, what was held back, and how each went.

Under each row, the first line of its message, wrapped at word boundaries to ``WIDTH``
characters in at most ``MESSAGE_LINES`` lines (what is left out ends in an ellipsis, after a whole
word)."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any
from zoneinfo import ZoneInfo

from followup_pipeline.settings import Settings
from followup_pipeline.store.alerts import Listed, listed
from followup_pipeline.store.db import connect, resolve_database_url

#: What ``list`` shows without ``--all``: the rows recorded in the last days.
RECENT_DAYS = 7
#: The width ``list`` wraps a row's message to, at word boundaries.
WIDTH = 100
#: How many lines of a row's message ``list`` shows at most.
MESSAGE_LINES = 3
#: The indent of a row's message.
INDENT = " " * 7


def wrapped(text: str, lines: int = MESSAGE_LINES) -> list[str]:
    """``text`` indented, in lines of at most ``WIDTH`` characters broken between words (a word
    longer than a line keeps a line of its own, whole); at most ``lines`` of them, the last
    ending in an ellipsis when text is left out. No text, no line."""
    return textwrap.wrap(
        text,
        width=WIDTH,
        initial_indent=INDENT,
        subsequent_indent=INDENT,
        break_long_words=False,
        break_on_hyphens=False,
        max_lines=lines,
        placeholder=" …",
    )


def channel(row: Listed) -> str:
    """How the alert of a row went: by mail, as a ClickUp task, held back, or not yet."""
    if row.action_key is None:
        if row.counted_in is None:
            if row.kind == "dead_letter":  # past the window's limit
                return "held back (the next dead-letter digest will name it)"
            return "held back (the next alert of it will count it)"
        if row.counted_in.startswith("alert:"):
            return f"held back, counted by {row.counted_in}"
        return row.counted_in  # "known before alerting"
    if row.mail_outcome in ("accepted", "confirmed"):
        return "mail"
    if row.task_outcome in ("accepted", "confirmed"):
        return f"clickup task {row.task_ref}"
    if row.mail_outcome in ("attempted", "unknown"):
        return "mail may have gone (unknown): the next alert run asks Sent Items"
    tried = [
        f"{name} {outcome}: {error or 'no error recorded'}"
        for name, outcome, error in (
            ("mail", row.mail_outcome, row.mail_error),
            ("clickup", row.task_outcome, row.task_error),
        )
        if outcome is not None
    ]
    return "NOT SENT yet" + (f" ({'; '.join(tried)})" if tried else ", an alert run is due")


def _list(args: argparse.Namespace, settings: Settings) -> int:
    zone = ZoneInfo(settings.timezone)
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        rows = listed(conn, days=None if args.all else RECENT_DAYS)
    for row in rows:
        held = f", counts {row.held} held back" if row.held else ""
        first_line = row.message.splitlines()[0] if row.message else ""
        print(
            f"{row.id:>5}  {row.occurred_at.astimezone(zone):%Y-%m-%d %H:%M %Z}  "
            f"{row.kind:<14}  {row.subject}: {channel(row)}{held}"
        )
        for line in wrapped(first_line):
            print(line)
        if row.action_key:
            print(f"{INDENT}key {row.action_key}")
    alerts = len({row.action_key for row in rows if row.action_key})
    scope = "in all" if args.all else f"recorded in the last {RECENT_DAYS} days (all: --all)"
    print(f"{len(rows)} row(s) in {alerts} alert(s) {scope}")
    return 0


def register(commands: Any) -> None:
    """Add ``alerts list``."""
    alerts = commands.add_parser("alerts", help="alerts sent to the operations owner")
    sub = alerts.add_subparsers(dest="alerts_command", required=True)
    listing = sub.add_parser("list", help="recent alerts, what was held back, by which channel")
    listing.add_argument("--all", action="store_true", help="every alert, not only the last week")
    listing.set_defaults(handler=_list)
