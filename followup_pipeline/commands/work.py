"""``followup work list | show | ack | close | replay``: the one list of work waiting for a person
(docs/architecture.md §12, docs/operations.md "Work waiting for a person").

Items are named by number (``12``, ``#12``) or by what they stand for (``event:12``,
``action:<key>``, a late follow-up step's ``step:<watch>:<step>``), or selected by filters:
``--pipeline``, ``--kind``, ``--step``, ``--error``, ``--owner``, ``--state``, ``--since``,
``--tenant``, ``--subject``. ``ack``, ``close`` and
``replay`` work on one item or a selection, each audited with ``--by`` and ``--reason``; ``--dry``
lists what they would touch and changes nothing. ``followup dead-letters`` and ``followup lms
queue`` are views of the same list.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from followup_pipeline.commands import add_by
from followup_pipeline.domain.work import (
    ITEM_KINDS,
    PIPELINES,
    STATES,
    WAITING,
    Selection,
    parse_since,
)
from followup_pipeline.engine import work
from followup_pipeline.engine.work import Done
from followup_pipeline.settings import Settings
from followup_pipeline.store import events, ledger
from followup_pipeline.store.db import connect, resolve_database_url, translated_errors
from followup_pipeline.store.work import WorkItem

#: Exit status of a request the command cannot do (a malformed name or filter).
USAGE = 2


def add_filters(parser: argparse.ArgumentParser, *, states: bool = True) -> None:
    """The filters every selection takes."""
    parser.add_argument("--pipeline", choices=PIPELINES)
    parser.add_argument("--kind", action="append", choices=ITEM_KINDS, default=[],
                        help="repeat for several")  # fmt: skip
    parser.add_argument("--step", help="the step it stopped at (0:crm_upsert)")
    parser.add_argument("--error", help="part of its last error, any case")
    parser.add_argument("--owner", help="its owner or backup")
    if states:
        parser.add_argument("--state", action="append", choices=(*STATES, "all"), default=[],
                            help="open, acknowledged, closed or all (default: the waiting "
                            "ones, open and acknowledged)")  # fmt: skip
    parser.add_argument("--since", help="failed since: today, yesterday, 6h, 2d, 2026-12-03T08:00")
    parser.add_argument("--tenant", help="a learning tenant's items")
    parser.add_argument("--subject", help="part of what it stands for (event:12, action:lms:)")


def _ids_and_subjects(names: Sequence[str]) -> tuple[list[int], list[str]]:
    ids: list[int] = []
    subjects: list[str] = []
    for name in names:
        text = name.strip().lstrip("#")
        if text.isdigit():
            ids.append(int(text))
        elif re.match(r"^(event|action|step):.+", text):
            subjects.append(text)
        else:
            raise ValueError(
                f"not an item: {name!r} (expected its number, event:<id>, action:<key> or "
                "step:<watch>:<step>)"
            )
    return ids, subjects


def selection_of(
    args: argparse.Namespace,
    settings: Settings,
    *,
    kinds: Sequence[str] = (),
    pipeline: str | None = None,
    states: Sequence[str] | None = None,
) -> Selection:
    """The selection the command line names (``ValueError`` for a malformed one). ``kinds`` and
    ``pipeline``: a view's own narrowing (``dead-letters``, ``lms queue``)."""
    names = list(getattr(args, "items", None) or [])
    ids, subjects = _ids_and_subjects(names)
    if subjects and ids:
        raise ValueError("name items by their numbers or by event:/action:, not both at once")
    chosen = states if states is not None else (getattr(args, "state", None) or [])
    if "all" in chosen:
        chosen = list(STATES)
    since = getattr(args, "since", None)
    asked_kinds = tuple(getattr(args, "kind", None) or ())
    return Selection(
        ids=tuple(ids),
        pipeline=getattr(args, "pipeline", None) or (None if names else pipeline),
        # Items named are theirs, whatever the view: a learning action named in dead-letters.
        kinds=asked_kinds or (() if names else tuple(kinds)),
        step=getattr(args, "step", None),
        error=getattr(args, "error", None),
        owner=getattr(args, "owner", None),
        states=tuple(chosen) or WAITING,
        since=parse_since(since, zone=settings.timezone, now=datetime.now(UTC)) if since else None,
        tenant=getattr(args, "tenant", None),
        names=tuple(subjects),
        subject=getattr(args, "subject", None),
    )


def _age(since: datetime, now: datetime) -> str:
    hours = (now - since).total_seconds() / 3600
    return f"{hours / 24:.1f}d" if hours >= 48 else f"{hours:.1f}h"


def _short(text: str | None, width: int = 100) -> str:
    line = (text or "").replace("\n", " ")
    return line if len(line) <= width else line[: width - 1] + "…"


def state_of(item: WorkItem, now: datetime) -> str:
    """Where an item stands, in a few words."""
    if item.state == "closed" and item.closed_at is not None:
        by = f" by {item.closed_by}" if item.closed_by else ""
        return f"closed {item.closed_at:%Y-%m-%d %H:%M}Z, {item.closed_how}{by}: {item.closed_note}"
    stands = f"{item.state} {_age(item.opened_at, now)}"
    if item.acknowledged_by:
        before = "" if item.state == "acknowledged" else " before it failed again"
        stands += f", acknowledged by {item.acknowledged_by}{before}"
    if item.replays:
        stands += f", replayed {item.replays}x (last by {item.replayed_by})"
    if item.failures > 1:
        stands += f", failed {item.failures}x"
    return stands


def print_items(items: Sequence[WorkItem], *, empty: str) -> None:
    """Each item in four lines, then the count by state."""
    now = datetime.now(UTC)
    if not items:
        print(empty)
        return
    for item in items:
        step = f" at step {item.step}" if item.step else ""
        backup = f" (backup {item.backup})" if item.backup else ""
        print(f"#{item.id} {item.pipeline} {item.kind}: {item.subject}{step}")
        print(f"    {item.what}; {state_of(item, now)}")
        print(f"    owner {item.owner}{backup}")
        print(f"    why: {_short(item.reason)}" + (f"; {_short(item.error)}" if item.error else ""))
    by_state = {s: sum(1 for i in items if i.state == s) for s in STATES}
    print(", ".join(f"{n} {s}" for s, n in by_state.items() if n))


def _connect(settings: Settings) -> Any:
    return connect(resolve_database_url(settings), autocommit=True)


def read(settings: Settings, selection: Selection) -> list[WorkItem]:
    """The items ``selection`` names, the list brought up to date first."""
    with translated_errors(), _connect(settings) as conn:
        return work.select(conn, selection, settings, at=datetime.now(UTC))


def _list(args: argparse.Namespace, settings: Settings) -> int:
    try:
        selection = selection_of(args, settings)
    except ValueError as error:
        print(f"followup: {error}", file=sys.stderr)
        return USAGE
    print_items(read(settings, selection), empty=f"nothing waits ({selection.describe()})")
    return 0


def _event_record(conn: psycopg.Connection[Any], event_id: int) -> dict[str, Any] | None:
    """An event whole: its body as text, with the steps its items finished."""
    event = events.event_by_id(conn, event_id)
    if event is None:
        return None
    shown = dataclasses.asdict(event)
    shown["body"] = bytes(event.body).decode("utf-8", "replace")
    shown["steps"] = [dataclasses.asdict(s) for s in events.completions_of(conn, event.id)]
    return shown


def _action_record(conn: psycopg.Connection[Any], key: str) -> dict[str, Any] | None:
    """A ledger action whole."""
    action = ledger.action_by_key(conn, key)
    return dataclasses.asdict(action) if action is not None else None


def raw_of(conn: psycopg.Connection[Any], item: WorkItem) -> dict[str, Any] | None:
    """The raw data an item stands for: its event or its ledger action."""
    if item.event_id is not None:
        return _event_record(conn, item.event_id)
    if item.action_key is not None:
        return _action_record(conn, item.action_key)
    return None


def _raw_by_name(conn: psycopg.Connection[Any], name: str) -> dict[str, Any] | None:
    """The record a name stands for, outside the list (an action never dead, an unhandled
    event)."""
    kind, _, value = name.partition(":")
    if kind == "event" and value.isdigit():
        return _event_record(conn, int(value))
    return _action_record(conn, value) if kind == "action" else None


def show(settings: Settings, names: Sequence[str]) -> int:
    """Items whole, with their raw data (``followup work show``, ``dead-letters show``). A name
    shows its newest item (a failure after a closed one is a new item) and an event's invalid
    items; a name no item stands for shows its record, outside the list."""
    try:
        ids, subjects = _ids_and_subjects(names)
    except ValueError as error:
        print(f"followup: {error}", file=sys.stderr)
        return USAGE
    shown: list[dict[str, Any]] = []
    with translated_errors(), _connect(settings) as conn:
        now = datetime.now(UTC)
        found = (
            work.select(conn, Selection(ids=tuple(ids), states=STATES), settings, at=now)
            if ids
            else []
        )
        for subject in subjects:
            matches = work.select(conn, Selection(subject=subject, states=STATES), settings, at=now)
            exact = [m for m in matches if m.subject == subject]
            parts = [m for m in matches if m.subject.startswith(f"{subject}/")]
            if exact or parts:
                found += ([max(exact, key=lambda m: m.id)] if exact else []) + parts
                continue
            raw = _raw_by_name(conn, subject)
            if raw is not None:
                shown.append({"subject": subject, "work_item": None, "raw": raw})
        shown = [{**dataclasses.asdict(i), "raw": raw_of(conn, i)} for i in found] + shown
    if not shown:
        print(f"followup: no such item: {' '.join(names)}", file=sys.stderr)
        return 1
    print(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2, default=str,
                     ensure_ascii=False))  # fmt: skip
    return 0


def _show(args: argparse.Namespace, settings: Settings) -> int:
    return show(settings, args.items)


Act = Callable[..., Done]
VERBS: dict[str, tuple[Act, str, str]] = {
    "ack": (work.acknowledge, "acknowledged", "would acknowledge"),
    "close": (work.close, "closed", "would close"),
    "replay": (work.replay, "replayed", "would replay"),
}


#: The filters a person may give; a view's own narrowing (its kinds) is not one of them.
FILTERS = ("pipeline", "kind", "step", "error", "owner", "since", "tenant", "subject")


def asked_for(args: argparse.Namespace) -> bool:
    """Whether the command line names items or gives a filter."""
    return bool(getattr(args, "items", None)) or any(getattr(args, f, None) for f in FILTERS)


def _refuse_usage(verb: str) -> int:
    print(
        f"followup: {verb} what? Name items (their numbers, event:<id>, action:<key>) or narrow "
        "with a filter (--pipeline, --kind, --step, --error, --owner, --since, --tenant, "
        "--subject); --all for every waiting item.",
        file=sys.stderr,
    )
    return USAGE


def _dry(conn: Any, verb: str, items: list[WorkItem], missing: list[str], said: str) -> int:
    """What ``verb`` would do with ``items``: those it would touch, those it would refuse."""
    would = VERBS[verb][2]
    refusals = {f"#{i.id}": why for i in items if (why := work.why_not(conn, i, verb))}
    wanted = [i for i in items if f"#{i.id}" not in refusals]
    print(f"{would} {len(wanted)} item(s) ({said}); nothing changed:")
    print_items(wanted, empty="(none)")
    for label, why in refusals.items():
        print(f"{label}: would refuse: {why}")
    for label in missing:
        tried = " (a replay by name would be tried)" if verb == "replay" and ":" in label else ""
        print(f"{label}: no such waiting item{tried}")
    return 0


def act(
    args: argparse.Namespace, settings: Settings, verb: str, selection: Selection, *,
    narrowed: bool,
) -> int:  # fmt: skip
    """Acknowledge, close or replay what ``selection`` names (``--dry``: only list it, with what
    would be refused). ``narrowed``: the person named items or gave a filter."""
    action, did, _ = VERBS[verb]
    if not narrowed and not getattr(args, "all", False):
        return _refuse_usage(verb)
    if verb == "close" and not (args.reason or "").strip():
        print("followup: close needs --reason (kept in the audit)", file=sys.stderr)
        return USAGE
    now = datetime.now(UTC)
    said = selection.describe()
    with translated_errors(), _connect(settings) as conn:
        items = work.select(conn, selection, settings, at=now)
        if len(items) >= work.SELECT_LIMIT:
            print(f"followup: the selection reaches {work.SELECT_LIMIT} items: narrow it "
                  f"({said})", file=sys.stderr)  # fmt: skip
            return USAGE
        missing = [f"#{n}" for n in selection.ids if n not in {i.id for i in items}]
        missing += [n for n in selection.names if n not in {i.subject for i in items}]
        if args.dry:
            return _dry(conn, verb, items, missing, said)
        by_name = tuple(m for m in missing if ":" in m) if verb == "replay" else ()
        if not items and not by_name:
            print(f"nothing to {verb} ({said})" + (f": no such waiting item {' '.join(missing)}"
                                                   if missing else ""))  # fmt: skip
            return 1 if missing else 0
        if verb == "replay":
            done = work.replay(conn, items, by=args.by, reason=args.reason, at=now, names=by_name)
        else:
            done = action(conn, items, by=args.by, reason=args.reason, at=now)
        for label in missing:
            if label not in by_name:
                done.refused[label] = "no such waiting item"
    for item in done.touched:
        print(f"#{item.id} {item.subject}: {did}")
    for name in done.by_name:
        print(f"{name}: {did} by name (no waiting item stood for it)")
    for label, why in done.refused.items():
        print(f"{label}: not {did}: {why}")
    if verb == "replay" and (done.touched or done.by_name):
        print(
            "replayed events go to their pipeline's next run (register for EspoCRM's, "
            "lead_intake for the lead sources', within seconds), original ids kept; replayed "
            "actions to their pipeline's next run, which asks the provider first"
        )
    count = len(done.touched) + len(done.by_name)
    print(f"{count} {did}, {len(done.refused)} refused ({said})")
    return 1 if done.refused else 0


def _verb(verb: str) -> Callable[[argparse.Namespace, Settings], int]:
    def handler(args: argparse.Namespace, settings: Settings) -> int:
        try:
            selection = selection_of(args, settings, states=_states_for(verb, args))
        except ValueError as error:
            print(f"followup: {error}", file=sys.stderr)
            return USAGE
        return act(args, settings, verb, selection, narrowed=asked_for(args))

    return handler


def _states_for(verb: str, args: argparse.Namespace) -> list[str]:
    """A bulk acknowledge takes the open items, a named one any waiting item (an acknowledged
    one is refused, saying so); closing and replaying take the waiting ones."""
    return ["open"] if verb == "ack" and not args.items else list(WAITING)


def add_act_options(parser: argparse.ArgumentParser, *, reason_help: str) -> None:
    """``--dry``, ``--all``, ``--by`` and ``--reason``."""
    parser.add_argument(
        "--dry", action="store_true", help="list what it would touch, change nothing"
    )
    parser.add_argument("--all", action="store_true", help="every waiting item, unfiltered")
    add_by(parser)
    parser.add_argument("--reason", help=reason_help)


def register(commands: Any) -> None:
    """Add ``work`` with ``list``, ``show``, ``ack``, ``close`` and ``replay``."""
    parser = commands.add_parser("work", help="the list of work waiting for a person")
    verbs = parser.add_subparsers(dest="work_command", required=True)
    listing = verbs.add_parser("list", help="the items a filter selects (default: waiting)")
    add_filters(listing)
    listing.set_defaults(handler=_list)
    one = verbs.add_parser("show", help="one item, whole, with its raw data")
    one.add_argument("items", nargs="+", help="its number, event:<id> or action:<key>")
    one.set_defaults(handler=_show)
    for verb, help_text, reason_help in (
        ("ack", "acknowledge: you own it, it alerts no more", "why (kept in the audit)"),
        ("close", "close with a decision: it is done with", "why (required; kept in the audit)"),
        ("replay", "re-process under the original ids", "why (kept in the audit)"),
    ):
        sub = verbs.add_parser(verb, help=help_text)
        sub.add_argument("items", nargs="*", help="numbers, or event:<id> / action:<key>")
        add_filters(sub, states=False)
        add_act_options(sub, reason_help=reason_help)
        sub.set_defaults(handler=_verb(verb))
