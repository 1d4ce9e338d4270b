"""``followup erase deal ID`` and ``followup erase person EMAIL``: remove the names, e-mail texts,
summaries and addresses we keep of a deal or a person, keep the counts and keys, record the
erasure in the audit, and say what could not be erased here (``store/erasure.py``)."""

from __future__ import annotations

import argparse
from typing import Any

from followup_pipeline.integrations.espocrm_webhooks import DEAL_ID
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.db import connect, resolve_database_url
from followup_pipeline.store.erasure import Erased, WatchOpen, erase_deal, erase_person


def _deal_id(text: str) -> str:
    if not DEAL_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is no CRM id (up to 64 of A-Z a-z 0-9 _ -)")
    return text


def _email(text: str) -> str:
    if "@" not in text or len(text) < 3 or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is no e-mail address")
    return text.strip()


def _said(what: str, erased: Erased) -> int:
    if not any(erased.changed.values()):
        print(f"nothing is kept of {what}: nothing erased")
        return 1
    done = ", ".join(f"{n} {kind}" for kind, n in erased.changed.items() if n)
    print(f"erased what is kept of {what}: {done}; the rows, keys and counts stay")
    if erased.pending_events:
        print(
            f"note: {erased.pending_events} event(s) still to be processed, or dead letters, hold "
            "it: erase again once they are settled"
        )
    if erased.elsewhere:
        print("not erased here (it lives with a vendor; erase it there):")
        for line in erased.elsewhere:
            print(f"  - {line}")
    return 0


def _erase(args: argparse.Namespace, settings: Settings) -> int:
    with connect(resolve_database_url(settings), autocommit=True) as conn, conn.transaction():
        if args.kind == "deal":
            try:
                erased = erase_deal(conn, args.target)
            except WatchOpen as error:
                print(f"followup: {error}")
                return 1
            subject, what = f"deal:{args.target}", f"deal {args.target}"
        else:
            erased = erase_person(conn, args.target)
            subject, what = "person:[erased]", "that person"
        if any(erased.changed.values()):
            done = ", ".join(f"{n} {kind}" for kind, n in erased.changed.items() if n)
            audit.record(
                conn,
                actor=args.by,
                action=f"erase.{args.kind}",
                # A person's address is what is erased: the audit does not keep it either.
                subject=subject,
                detail=done,
                reason=args.reason,
            )
    return _said(what, erased)


def register(commands: Any) -> None:
    """Add ``erase deal`` and ``erase person``."""
    top = commands.add_parser("erase", help="erase what is kept of a deal or a person")
    sub = top.add_subparsers(dest="erase_command", required=True)
    for kind, kind_type, meta in (("deal", _deal_id, "DEAL_ID"), ("person", _email, "EMAIL")):
        one = sub.add_parser(kind, help=f"erase a {kind}'s names, texts and addresses")
        one.add_argument("target", type=kind_type, metavar=meta)
        one.add_argument(
            "--by", type=audit.actor, default=audit.os_user(), help="who erases (default: you)"
        )
        one.add_argument("--reason", help="why (e.g. the request's reference)")
        one.set_defaults(handler=_erase, kind=kind)
