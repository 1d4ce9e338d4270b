"""``followup dead-letters list | show NAME | replay [NAME…] [filters]``: the dead letters' view
of the one list of work waiting for a person (``followup work``): dead events, dead actions and
invalid items, named ``event:<id>``, ``action:<key>`` or by their item number.

``replay`` puts dead events back to pending under their original ids; the ``crm_events``
sensor's next ``register`` run takes them (within 30 s), skipping the steps they finished before.
A dead action gets a fresh budget of attempts; its run asks the provider first. Filters select
in bulk (``--step 0:crm_upsert --since today``); ``--dry`` lists what they select.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from followup_pipeline.commands.work import (
    USAGE,
    act,
    add_act_options,
    add_filters,
    asked_for,
    print_items,
    read,
    selection_of,
    show,
)
from followup_pipeline.domain.work import DEAD_LETTER_KINDS
from followup_pipeline.settings import Settings


def _list(args: argparse.Namespace, settings: Settings) -> int:
    try:
        selection = selection_of(args, settings, kinds=DEAD_LETTER_KINDS)
    except ValueError as error:
        print(f"followup: {error}", file=sys.stderr)
        return USAGE
    print_items(read(settings, selection), empty="no dead letters")
    return 0


def _show(args: argparse.Namespace, settings: Settings) -> int:
    return show(settings, [args.name])


def _replay(args: argparse.Namespace, settings: Settings) -> int:
    try:
        selection = selection_of(args, settings, kinds=DEAD_LETTER_KINDS, states=None)
    except ValueError as error:
        print(f"followup: {error}", file=sys.stderr)
        return USAGE
    return act(args, settings, "replay", selection, narrowed=asked_for(args))


def register(commands: Any) -> None:
    """Add ``dead-letters`` with ``list``, ``show`` and ``replay``."""
    parser = commands.add_parser("dead-letters", help="list, show and replay dead letters")
    actions = parser.add_subparsers(dest="dead_letters_command", required=True)
    listing = actions.add_parser("list", help="every waiting dead letter (filters narrow it)")
    add_filters(listing)
    listing.set_defaults(handler=_list)
    one = actions.add_parser("show", help="one dead letter, whole")
    one.add_argument("name", help="event:<id>, action:<key> or its item number")
    one.set_defaults(handler=_show)
    replay = actions.add_parser("replay", help="re-process dead letters by their original id")
    replay.add_argument("items", nargs="*", help="event:<id>, action:<key> or item numbers")
    add_filters(replay, states=False)
    add_act_options(replay, reason_help="why (kept in the audit)")
    replay.set_defaults(handler=_replay)
