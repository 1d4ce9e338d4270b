"""Dead letters by name: ``event:<id>`` (the event log) and ``action:<key>`` (the action ledger);
their list is the work list's (``engine/work.py``).

Replaying an event puts it back to ``pending`` under its original id with fresh attempts, so the
steps it finished before (``step_completions``) are skipped. An ``unhandled`` event is replayable
once its source has a handler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from followup_pipeline.store import events
from followup_pipeline.store.events import HANDLED_SOURCES

Kind = Literal["event", "action"]


@dataclass(frozen=True)
class Name:
    """A parsed dead-letter name."""

    kind: Kind
    value: str

    @property
    def event_id(self) -> int:
        """The id of an ``event:<id>`` name."""
        return int(self.value)

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


def parse_name(text: str) -> Name:
    """``event:<id>`` or ``action:<key>``; ``ValueError`` with the expected forms otherwise."""
    kind, sep, value = text.strip().partition(":")
    if sep and kind == "event" and value.isdigit():
        return Name("event", value)
    if sep and kind == "action" and value:
        return Name("action", value)
    raise ValueError(f"not a dead-letter name: {text!r} (expected event:<id> or action:<key>)")


def requeue_events(
    conn: psycopg.Connection[Any], ids: Sequence[int]
) -> tuple[list[int], dict[int, str]]:
    """Put dead (or now handled, unhandled) events back to pending; the refused with why."""
    done: list[int] = []
    refused: dict[int, str] = {}
    for event_id in ids:
        event = events.event_by_id(conn, event_id)
        if event is None:
            refused[event_id] = "no such event"
        elif event.status not in ("dead", "unhandled"):
            refused[event_id] = f"not a dead letter (status {event.status})"
        elif event.source not in HANDLED_SOURCES:
            refused[event_id] = f"source {event.source!r} has no handler yet"
        elif events.requeue(conn, event_id):
            done.append(event_id)
        else:
            refused[event_id] = "changed while replaying; try again"
    return done, refused
