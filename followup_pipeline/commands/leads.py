"""``followup leads list [--limit N]``: the leads the intake has taken in, one per person, with
how many source events brought each and from where."""

from __future__ import annotations

import argparse
from typing import Any

from followup_pipeline.domain.localtime import for_people
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import connect, resolve_database_url
from followup_pipeline.store.leads import list_leads


def _list(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        rows = list_leads(conn, limit=args.limit)
    print(f"{'id':>6}  {'e-mail':<32} {'events':>6}  {'sources':<28} {'last seen':<21} name")
    for row in rows:
        who = " — ".join(part for part in (row.name, row.company) if part) or "—"
        print(
            f"{row.id:>6}  {row.email:<32} {row.events:>6}  {row.sources:<28} "
            f"{for_people(row.last_seen_at, settings.timezone):<21} {who}"
        )
    print(f"{len(rows)} lead(s)")
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("a number of leads, at least 1")
    return value


def register(commands: Any) -> None:
    """Add ``leads list``."""
    leads = commands.add_parser("leads", help="the leads taken in (one per person)")
    sub = leads.add_subparsers(dest="leads_command", required=True)
    listing = sub.add_parser("list", help="the leads, newest first, with their source events")
    listing.add_argument(
        "--limit", type=_positive, default=200, help="at most this many (default 200)"
    )
    listing.set_defaults(handler=_list)
