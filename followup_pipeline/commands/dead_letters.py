"""``followup dead-letters list | show NAME | replay NAME…`` (``event:<id>``, ``action:<key>``).

``replay`` puts dead events back to pending under their original ids; the ``crm_events`` sensor's
next ``register`` run takes them (within 30 s), skipping the steps they finished before.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from followup_pipeline.settings import Settings
from followup_pipeline.store import audit
from followup_pipeline.store.db import connect, resolve_database_url, translated_errors
from followup_pipeline.store.dead_letters import (
    DeadEventRecord,
    dead_letter,
    dead_letters,
    parse_name,
    replay_actions,
    requeue_events,
)

#: Exit status of a request the command cannot do (a malformed name).
USAGE = 2


def _short(text: str | None, width: int = 80) -> str:
    line = (text or "").replace("\n", " ")
    return line if len(line) <= width else line[: width - 1] + "…"


def _list(args: argparse.Namespace, settings: Settings) -> int:
    with translated_errors(), connect(resolve_database_url(settings)) as conn:
        found = dead_letters(conn, max_attempts=settings.action_max_attempts)
    if not found:
        print("no dead letters")
        return 0
    for item in found:
        at = item.at.isoformat(timespec="seconds")
        step = item.step or "-"
        print(f"{item.name}\t{at}\t{item.what}\tattempts={item.attempts}\tstep={step}")
        print(f"\t{_short(item.error)}")
    return 0


def _show(args: argparse.Namespace, settings: Settings) -> int:
    try:
        name = parse_name(args.name)
    except ValueError as error:
        print(f"followup: {error}", file=sys.stderr)
        return USAGE
    with translated_errors(), connect(resolve_database_url(settings)) as conn:
        record = dead_letter(conn, name)
    if record is None:
        print(f"followup: no {name}", file=sys.stderr)
        return 1
    if isinstance(record, DeadEventRecord):
        shown = dataclasses.asdict(record.event)
        shown["body"] = bytes(record.event.body).decode("utf-8", "replace")
        shown["steps"] = [dataclasses.asdict(step) for step in record.steps]
    else:
        shown = dataclasses.asdict(record)
    print(json.dumps(shown, indent=2, default=str, ensure_ascii=False))
    return 0


def _replay(args: argparse.Namespace, settings: Settings) -> int:
    try:
        names = [parse_name(text) for text in args.names]
    except ValueError as error:
        print(f"followup: {error}", file=sys.stderr)
        return USAGE
    events = [n.event_id for n in names if n.kind == "event"]
    keys = [n.value for n in names if n.kind == "action"]
    with translated_errors(), connect(resolve_database_url(settings), autocommit=True) as conn:
        with conn.transaction():
            requeued, refused = requeue_events(conn, events)
        with conn.transaction():
            replayed, refused_actions = replay_actions(conn, keys)
        with conn.transaction():
            subjects = [f"event:{e}" for e in requeued] + [f"action:{k}" for k in replayed]
            for subject in subjects:
                audit.record(conn, actor=args.by, action="dead_letter.replay", subject=subject,
                             reason=args.reason)  # fmt: skip
    for event_id in requeued:
        print(f"event:{event_id}: queued for its pipeline's next run (original id kept)")
    for event_id, why in refused.items():
        print(f"event:{event_id}: not replayed: {why}")
    for key in replayed:
        print(f"action:{key}: retried by the next evaluate run (ClickUp is searched first)")
    for key, why in refused_actions.items():
        print(f"action:{key}: not replayed: {why}")
    return 1 if refused or refused_actions else 0


def register(commands: Any) -> None:
    """Add ``dead-letters`` with ``list``, ``show`` and ``replay``."""
    parser = commands.add_parser("dead-letters", help="list, show and replay dead letters")
    actions = parser.add_subparsers(dest="dead_letters_command", required=True)
    actions.add_parser("list", help="every dead letter").set_defaults(handler=_list)
    show = actions.add_parser("show", help="one dead letter, whole")
    show.add_argument("name", help="event:<id> or action:<key>")
    show.set_defaults(handler=_show)
    replay = actions.add_parser("replay", help="re-process dead letters by their original id")
    replay.add_argument("names", nargs="+", help="event:<id> or action:<key>")
    replay.add_argument(
        "--by", type=audit.actor, default=audit.os_user(), help="who replays (default: you)"
    )
    replay.add_argument("--reason", help="why (kept in the audit)")
    replay.set_defaults(handler=_replay)
