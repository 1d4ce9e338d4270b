"""``followup review list [--all] | show ID | accept ID [--line1 … --line2 …] | reject ID``."""

from __future__ import annotations

import argparse
from typing import Any

from followup_pipeline.clock import build_clock
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.db import connect, resolve_database_url
from followup_pipeline.store.enrichments import ReviewItem, review_item, review_items
from followup_pipeline.store.lead_review import LEAD_SUBJECT
from followup_pipeline.store.review import ReviewError, decide


def _subject(item: ReviewItem) -> str:
    """What the item is about: a deal's summary or a lead event's classification."""
    if item.subject_type == LEAD_SUBJECT:
        return f"lead event {item.subject_id}"
    return f"deal {item.subject_id}"


def _list(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        items = review_items(conn, include_resolved=args.all)
    for item in items:
        state = item.resolution or "open"
        print(f"{item.id:>5}  {item.created_at:%Y-%m-%d %H:%M}  {state:<8}  {_subject(item)}")
        print(f"       {item.error}")
    print(f"{len(items)} review item(s)")
    return 0


def _show(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        item = review_item(conn, args.item_id)
    if item is None:
        print(f"followup: no review item {args.item_id}")
        return 1
    print(f"review item {item.id}: {_subject(item)} ({item.deal_name})")
    print(f"  state:  {item.resolution or 'open'}")
    print(f"  model:  {item.model}, {item.created_at:%Y-%m-%d %H:%M:%S %Z}")
    print(f"  reason: {item.error}")
    print(f"  answer: {item.raw_output!r}")
    print(f"  input:  {item.input_hash}")
    print("  what was sent (after trimming and masking):")
    for line in (item.source_text or "").splitlines():
        print(f"    {line}")
    return 0


def _decide(args: argparse.Namespace, settings: Settings) -> int:
    now = build_clock(settings.now).now()
    given = args.line1 is not None or args.line2 is not None
    lines = (args.line1, args.line2) if given else None
    with connect(resolve_database_url(settings), autocommit=True) as conn, conn.transaction():
        try:
            said = decide(
                conn,
                args.item_id,
                action=args.action,
                lines=lines,
                max_chars=settings.enrich_line_max_chars,
                now=now,
                answer=args.answer,
                reason=args.reason if args.action == "reject" else None,
            )
        except ReviewError as error:
            print(f"followup: {error}")
            return 1
        audit.record(
            conn,
            actor=args.by,
            action=f"review.{args.action}",
            subject=f"review:{args.item_id}",
            detail=said,
            reason=args.reason,
        )
    print(said)
    return 0


def register(commands: Any) -> None:
    """Add ``review`` and its sub-commands."""
    review = commands.add_parser(
        "review", help="model answers the check refused (deal summaries, lead classifications)"
    )
    sub = review.add_subparsers(dest="review_command", required=True)
    listing = sub.add_parser("list", help="open review items (all with --all)")
    listing.add_argument("--all", action="store_true", help="include settled items")
    listing.set_defaults(handler=_list)
    show = sub.add_parser("show", help="one item: the answer, the reason, what was sent")
    show.add_argument("item_id", type=int)
    show.set_defaults(handler=_show)
    accept = sub.add_parser(
        "accept", help="store the item's answer (or yours) as the summary or classification"
    )
    accept.add_argument("item_id", type=int)
    accept.add_argument("--line1", help="a summary's first line, corrected")
    accept.add_argument("--line2", help="a summary's second line, corrected")
    accept.add_argument("--answer", help="a lead's classification, corrected (lead.v2 JSON)")
    accept.add_argument(
        "--by", type=audit.actor, default=audit.os_user(), help="who decides (default: you)"
    )
    accept.add_argument("--reason", help="why (kept in the audit)")
    accept.set_defaults(handler=_decide, action="accept")
    reject = sub.add_parser(
        "reject", help="no summary until the deal's e-mails change; a lead's classification ends"
    )
    reject.add_argument("item_id", type=int)
    reject.add_argument("--reason", help="why (kept with a lead's event, and in the audit)")
    reject.add_argument(
        "--by", type=audit.actor, default=audit.os_user(), help="who decides (default: you)"
    )
    reject.set_defaults(handler=_decide, action="reject", line1=None, line2=None, answer=None)
