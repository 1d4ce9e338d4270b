"""``followup purge [--older-than AGE] [--batch N] [--dry-run]``: remove what the machine no
longer needs past its retention (``FOLLOWUP_RETAIN_*_DAYS``, or ``--older-than`` for all):
processed webhooks' raw bodies, settled review items' e-mail text, finished Dagster runs.

Every kind is removed in batches, each its own short transaction, so the machine runs on while
a purge works; what is kept and why is in ``store/retention.py``.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from followup_pipeline.clock import build_clock
from followup_pipeline.machine import NoInstance, dagster_home, open_instance
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.db import connect, resolve_database_url, translated_errors
from followup_pipeline.store.retention import (
    DEFAULT_BATCH,
    Retention,
    clear_email_text,
    delete_old_runs,
    describe_age,
    empty_event_bodies,
    parse_age,
)

#: Finished runs younger than this are never deleted, whatever ``--older-than`` says.
MIN_RUN_AGE = timedelta(days=7)
#: Exit status of a request the command cannot do (a malformed ``--older-than`` or ``--batch``).
USAGE = 2


def _line(what: str, count: int, *, age: timedelta, before: datetime, dry_run: bool) -> str:
    """One kind's line: how many, and the cut-off it was measured against."""
    verb = "would go" if dry_run else "removed"
    return (
        f"{what:<15} {count:>7} {verb}  "
        f"(older than {describe_age(age)}: before {before:%Y-%m-%d %H:%M} UTC)"
    )


def _purge(args: argparse.Namespace, settings: Settings) -> int:
    try:
        older_than = None if args.older_than is None else parse_age(args.older_than)
    except ValueError as error:
        print(f"followup: {error}", file=sys.stderr)
        return USAGE
    if args.batch < 1:
        print(f"followup: --batch {args.batch}: give a number of at least 1", file=sys.stderr)
        return USAGE
    retention = Retention.of(settings, older_than=older_than)
    now = build_clock(settings.now).now().astimezone(UTC)
    dry_run: bool = args.dry_run
    counts: list[int] = []

    def done(what: str, count: int, age: timedelta) -> None:
        """Print a kind's line as soon as it is done: a purge stopped later still says so."""
        counts.append(count)
        print(_line(what, count, age=age, before=now - age, dry_run=dry_run), flush=True)

    url = resolve_database_url(settings)
    with translated_errors(), connect(url, autocommit=True) as conn:
        age = retention.webhook_bodies
        count = empty_event_bodies(conn, before=now - age, batch=args.batch, dry_run=dry_run)
        done("webhook bodies", count, age)
        age = retention.email_text
        count = clear_email_text(conn, before=now - age, batch=args.batch, dry_run=dry_run)
        done("e-mail texts", count, age)
    try:
        instance = open_instance(settings)
    except NoInstance as error:
        print(f"{'dagster runs':<15} skipped: {error}")
    else:
        with instance:
            age = max(retention.runs, MIN_RUN_AGE)
            if age > retention.runs:
                print(
                    f"{'dagster runs':<15} kept for {describe_age(MIN_RUN_AGE)} at least: the "
                    "alerts look back 6 h for failed runs, an operator a week"
                )
            count = delete_old_runs(
                instance,
                before=now - age,
                batch=args.batch,
                dry_run=dry_run,
                storage=dagster_home(settings) / "storage",
            )
        done("dagster runs", count, age)
    total = sum(counts)
    if dry_run:
        print(f"{'total':<15} {total:>7} would go (dry run: nothing was changed)")
        return 0
    print(f"{'total':<15} {total:>7} removed")
    with translated_errors(), connect(url, autocommit=True) as conn, conn.transaction():
        audit.record(
            conn,
            actor=args.by,
            action="purge",
            detail=f"{total} removed: bodies, e-mail texts, runs " + "/".join(map(str, counts)),
            reason=args.reason,
        )
    return 0


def register(commands: Any) -> None:
    """Add ``purge``."""
    purge = commands.add_parser(
        "purge",
        help="remove old webhook bodies, e-mail text and Dagster runs past their retention",
        description=(
            "Empty processed webhooks' raw bodies (dead and pending events keep theirs), forget "
            "the e-mail text of settled review items and delete finished Dagster runs, each "
            "older than its FOLLOWUP_RETAIN_*_DAYS (default 90) or --older-than."
        ),
    )
    purge.add_argument(
        "--older-than",
        metavar="AGE",
        help="one retention for all three kinds: 90d, 12h or 2w (default: the settings')",
    )
    purge.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"rows (or runs) per transaction (default {DEFAULT_BATCH})",
    )
    purge.add_argument("--dry-run", action="store_true", help="count what would go, change nothing")
    purge.add_argument(
        "--by", type=audit.actor, default=audit.os_user(), help="who purges (default: you)"
    )
    purge.add_argument("--reason", help="why (kept in the audit)")
    purge.set_defaults(handler=_purge)
