"""``followup alerts list [--all]``: recent alerts, what was held back, and how each went."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from followup_pipeline.clock import build_clock
from followup_pipeline.settings import Settings
from followup_pipeline.store.alerts import Listed, listed
from followup_pipeline.store.db import connect, resolve_database_url

#: What ``list`` shows without ``--all``.
RECENT = timedelta(days=7)
LIMIT = 200


def channel(row: Listed) -> str:
    """How the alert of a row went: by mail, as a ClickUp task, held back, or not yet."""
    if row.action_key is None:
        return f"held, counted in {row.counted_in}" if row.counted_in else "held"
    if row.mail_outcome in ("accepted", "confirmed"):
        return "mail"
    if row.mail_outcome == "suppressed":
        return "not sent (dry run)"
    if row.task_outcome in ("accepted", "confirmed"):
        return f"clickup task {row.task_ref}"
    tried = [
        f"{name} {outcome}"
        for name, outcome in (("mail", row.mail_outcome), ("clickup", row.task_outcome))
        if outcome is not None
    ]
    return "NOT SENT yet" + (f" ({', '.join(tried)})" if tried else "")


def _list(args: argparse.Namespace, settings: Settings) -> int:
    now = build_clock(settings.now).now()
    since = now - RECENT if not args.all else now.replace(year=1970)
    zone = ZoneInfo(settings.timezone)
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        rows = listed(conn, since=since, limit=LIMIT if not args.all else 1_000_000)
    for row in rows:
        held = f", counts {row.held} held" if row.held else ""
        print(
            f"{row.id:>5}  {row.occurred_at.astimezone(zone):%Y-%m-%d %H:%M}  "
            f"{row.kind:<14}  {row.subject}: {channel(row)}{held}"
        )
        print(f"       {row.message.splitlines()[0][:160] if row.message else ''}")
        if row.action_key:
            print(f"       key {row.action_key}")
    scope = "in all" if args.all else f"in the last {RECENT.days} days (all: --all)"
    print(f"{len(rows)} alert(s) {scope}")
    return 0


def register(commands: Any) -> None:
    """Add ``alerts list``."""
    alerts = commands.add_parser("alerts", help="alerts sent to the operations owner")
    sub = alerts.add_subparsers(dest="alerts_command", required=True)
    listing = sub.add_parser("list", help="recent alerts, what was held back, by which channel")
    listing.add_argument("--all", action="store_true", help="every alert, not only the last week")
    listing.set_defaults(handler=_list)
