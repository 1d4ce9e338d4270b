"""``followup lms queue | content … | certificates``: the learning reminders' catch-up queue,
content and certificates.

- ``lms queue [--tenant T] [--closed-days N]``: the learning reminders' part of the list of work
  waiting for a person (``followup work --pipeline learning``): every action that can be neither
  done nor suppressed, with its owner (and backup), how long it waits and why; closed ones of
  the last days with how they closed.
- ``lms content add TENANT CONTENT --version N --title … --course ID --cmid ID --publish-at
  WHEN``: a version of a piece of content (its course module in Moodle, kept hidden until
  published); ``lms content approve TENANT CONTENT VERSION --by NAME``; ``lms content list
  [TENANT]``: each version, where it stands and why.
- ``lms certificates [TENANT]``: each completion and where its certificate's export stands.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from followup_pipeline.commands import add_by
from followup_pipeline.commands.work import print_items, read
from followup_pipeline.domain.work import Selection
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit, lms, lms_certificates, lms_content
from followup_pipeline.store.db import connect, resolve_database_url
from followup_pipeline.store.lms_content import ContentVersion, content_lock
from followup_pipeline.store.run_lock import RunLock


def _queue(args: argparse.Namespace, settings: Settings) -> int:
    """The learning reminders' view of the list of work waiting for a person."""
    now = datetime.now(UTC)
    states = ["open", "acknowledged"] + (["closed"] if args.closed_days else [])
    selection = Selection(pipeline="learning", tenant=args.tenant, states=tuple(states))
    items = read(settings, selection)
    if args.closed_days:
        since = now - timedelta(days=args.closed_days)
        items = [i for i in items if i.closed_at is None or i.closed_at >= since]
    print_items(
        items,
        empty="the catch-up queue is empty: every due action is done, suppressed or on its way",
    )
    return 0


def _when(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a date and time: {text!r} (e.g. 2026-12-02T09:00)"
        ) from None


#: A content id as the table takes it.
CONTENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _content_id(text: str) -> str:
    if not CONTENT_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"a content id of letters, digits, '.', '_' and '-' (e.g. week-1), not {text!r}"
        )
    return text


@contextmanager
def _content_held(url: str, tenant_id: str, content_id: str) -> Iterator[bool]:
    """The lock a publishing run holds on a piece of content; False when a run holds it."""
    lock = RunLock.try_take(url, content_lock(tenant_id, content_id), owner="followup lms")
    try:
        if not lock.held:
            print(
                f"a run is publishing {content_id} of {tenant_id} right now; try again in a minute"
            )
        yield lock.held
    finally:
        lock.release()


def _content_add(args: argparse.Namespace, settings: Settings) -> int:
    url = resolve_database_url(settings)
    with (
        _content_held(url, args.tenant, args.content) as held,
        connect(url, autocommit=True) as conn,
    ):
        if not held:
            return 1
        tenant = lms.tenant(conn, args.tenant)
        if tenant is None:
            print(f"no tenant {args.tenant!r}")
            return 2
        when = args.publish_at
        if when.tzinfo is None:  # a local time of the tenant's zone
            when = when.replace(tzinfo=ZoneInfo(tenant.time_zone))
        row = ContentVersion(
            tenant_id=tenant.id,
            content_id=args.content,
            version=args.version,
            title=args.title,
            course_id=args.course,
            cmid=args.cmid,
            publish_at=when,
        )
        with conn.transaction():
            saved = lms_content.save(conn, row)
            if saved is not None:
                audit.record(
                    conn,
                    actor=args.by,
                    action="content.add" if saved else "content.change",
                    subject=f"content:{tenant.id}:{args.content}",
                    detail=f"v{args.version} {args.title!r}, module {args.cmid}, due {when}",
                    reason=args.reason,
                )
    if saved is None:
        print(f"{args.content} v{args.version}: published or superseded already; left as it is")
        return 1
    print(
        f"{args.content} v{args.version} {'added' if saved else 'changed (approval withdrawn)'}: "
        f"due {when.isoformat()}; it waits for an approval "
        f"(`followup lms content approve {tenant.id} {args.content} {args.version} --by NAME`)"
    )
    return 0


def _content_approve(args: argparse.Namespace, settings: Settings) -> int:
    url = resolve_database_url(settings)
    with (
        _content_held(url, args.tenant, args.content) as held,
        connect(url, autocommit=True) as conn,
        conn.transaction(),
    ):
        if not held:
            return 1
        done = lms_content.approve(
            conn, args.tenant, args.content, args.version, by=args.by, at=datetime.now(UTC)
        )
        if done:
            audit.record(
                conn,
                actor=args.by,
                action="content.approve",
                subject=f"content:{args.tenant}:{args.content}",
                detail=f"v{args.version} approved",
                reason=args.reason,
            )
        current = [r for r in lms_content.rows(conn, args.tenant) if r.content_id == args.content]
    if not done:
        print(f"no version {args.version} of {args.content!r} of {args.tenant!r} that waits")
        return 2
    latest = max(r.current_version for r in current)
    note = "" if args.version >= latest else f"; version {latest} is current: this one never goes"
    print(f"{args.content} v{args.version} approved by {args.by}{note}")
    return 0


def _content_list(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        listed = lms_content.rows(conn, args.tenant)
    for row in listed:
        approved = f"approved by {row.approved_by}" if row.approved_by else "not approved"
        current = "current" if row.current else f"outdated (v{row.current_version} is current)"
        why = f"; {row.reason}" if row.reason else ""
        print(
            f"{row.tenant_id} {row.content_id} v{row.version} ({row.title}): {row.state}, "
            f"{approved}, {current}, due {row.publish_at:%Y-%m-%d %H:%M}Z, cm {row.cmid}{why}"
        )
    print(f"{len(listed)} version(s)")
    return 0


def _certificates(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn:
        listed = lms_certificates.rows(conn, args.tenant)
    for row in listed:
        who = row.learner_name or f"learner {row.learner_id}"
        credential = f", credential {row.credential_id}" if row.credential_id else ""
        lost = f", a lost one issued again ({row.lost_at:%Y-%m-%d})" if row.lost_at else ""
        why = f" ({row.reason})" if row.reason else ""
        print(
            f"{row.tenant_id} {who} course {row.course_id}: {row.state}{why}, issue "
            f"#{row.generation}{credential}{lost}"
        )
    print(f"{len(listed)} certificate(s)")
    return 0


def register_work(sub: Any) -> None:
    """Add ``lms queue``, ``lms content add|approve|list`` and ``lms certificates``."""
    queue = sub.add_parser("queue", help="open actions with their owner: the catch-up queue")
    queue.add_argument("--tenant")
    queue.add_argument("--closed-days", dest="closed_days", type=int, default=0,
                       help="show the items closed in the last N days too")  # fmt: skip
    queue.set_defaults(handler=_queue)
    content = sub.add_parser("content", help="content versions: add, approve, list")
    csub = content.add_subparsers(dest="content_command", required=True)
    add = csub.add_parser("add", help="a version of a piece of content (waits for approval)")
    add.add_argument("tenant")
    add.add_argument("content", type=_content_id)
    add.add_argument("--version", type=int, required=True)
    add.add_argument("--title", required=True)
    add.add_argument("--course", type=int, required=True)
    add.add_argument("--cmid", type=int, required=True, help="its course module in Moodle")
    when = "when it goes out (ISO; without an offset: the tenant's zone)"
    add.add_argument("--publish-at", dest="publish_at", type=_when, required=True, help=when)
    add_by(add)
    add.add_argument("--reason", help="why (kept in the audit)")
    add.set_defaults(handler=_content_add)
    approve = csub.add_parser("approve", help="approve a version that waits")
    approve.add_argument("tenant")
    approve.add_argument("content")
    approve.add_argument("version", type=int)
    approve.add_argument("--by", required=True, type=audit.actor, help="who approves it")
    approve.add_argument("--reason", help="why (kept in the audit)")
    approve.set_defaults(handler=_content_approve)
    listing = csub.add_parser("list", help="every version and where it stands")
    listing.add_argument("tenant", nargs="?")
    listing.set_defaults(handler=_content_list)
    certificates = sub.add_parser("certificates", help="completions and their certificates")
    certificates.add_argument("tenant", nargs="?")
    certificates.set_defaults(handler=_certificates)
