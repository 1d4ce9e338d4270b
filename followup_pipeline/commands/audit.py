"""``followup audit list [--subject S] [--days N]``: who did what, when, to what and why; every
operator action is recorded (``store/audit.py``)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from followup_pipeline.domain.localtime import for_people
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.db import connect, resolve_database_url


def _list(args: argparse.Namespace, settings: Settings) -> int:
    since = datetime.now(UTC) - timedelta(days=args.days) if args.days else None
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        rows = audit.entries(conn, subject=args.subject, since=since, limit=args.limit)
    for row in rows:
        what = f" {row.subject}" if row.subject else ""
        detail = f": {row.detail}" if row.detail else ""
        why = f" (why: {row.reason})" if row.reason else ""
        print(
            f"{for_people(row.at, settings.timezone)}  {row.actor}  {row.action}{what}{detail}{why}"
        )
    print(f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'}")
    return 0


def register(commands: Any) -> None:
    """Add ``audit list``."""
    top = commands.add_parser("audit", help="who did what: every operator action")
    sub = top.add_subparsers(dest="audit_command", required=True)
    listing = sub.add_parser("list", help="the audit, newest first")
    listing.add_argument("--subject", help="one subject: deal:ID, watch:ID, cadence:NAME, …")
    listing.add_argument("--days", type=int, default=0, help="only the last N days")
    listing.add_argument("--limit", type=int, default=200)
    listing.set_defaults(handler=_list)
