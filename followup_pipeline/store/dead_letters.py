"""Dead letters by name: ``event:<id>`` (the event log) and ``action:<key>`` (the action ledger).

Replaying an event puts it back to ``pending`` under its original id with fresh attempts, so the
steps it finished before (``step_completions``) are skipped. An ``unhandled`` event is replayable
once its source has a handler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg

from followup_pipeline.store import events, ledger
from followup_pipeline.store.events import HANDLED_SOURCES, Event, StepCompletion
from followup_pipeline.store.ledger import Action

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


@dataclass(frozen=True)
class DeadLetter:
    """One line of the dead-letter list: its name, when, what, attempts, step and last error."""

    name: str
    at: datetime
    what: str
    attempts: int
    step: str | None
    error: str | None
    #: When it became a dead letter: a second death after a replay has a later one.
    since: datetime


@dataclass(frozen=True)
class DeadEventRecord:
    """A dead-lettered event, whole, with the steps of its items that finished."""

    event: Event
    steps: list[StepCompletion]


def parse_name(text: str) -> Name:
    """``event:<id>`` or ``action:<key>``; ``ValueError`` with the expected forms otherwise."""
    kind, sep, value = text.strip().partition(":")
    if sep and kind == "event" and value.isdigit():
        return Name("event", value)
    if sep and kind == "action" and value:
        return Name("action", value)
    raise ValueError(f"not a dead-letter name: {text!r} (expected event:<id> or action:<key>)")


def dead_letters(conn: psycopg.Connection[Any], *, max_attempts: int) -> list[DeadLetter]:
    """Every dead letter, events first, then actions, then the items of done events that were
    skipped as invalid: name, when, attempts, step and last error.

    An action is dead once it failed ``max_attempts`` times since its last replay.
    """
    found = [
        DeadLetter(
            name=f"event:{row.id}",
            at=row.received_at,
            what=f"{row.source} {row.event_type or ''}".strip(),
            attempts=row.attempts,
            step=row.dead_step,
            error=row.last_error,
            since=row.processed_at or row.received_at,
        )
        for row in events.dead_events(conn)
    ]
    found += [
        DeadLetter(
            name=f"action:{row.idempotency_key}",
            at=row.updated_at,
            what=row.kind,
            attempts=row.attempts,
            step=None,
            error=row.last_error,
            since=row.updated_at,
        )
        for row in ledger.dead_actions(conn, max_attempts=max_attempts)
    ]
    found += [
        DeadLetter(
            name=f"event:{row.event_id}",
            at=row.completed_at,
            what=f"{row.source} {row.event_type or ''} (item skipped, the others applied)".strip(),
            attempts=row.attempts,
            step=row.key.split(":", 1)[1],
            error=row.reason,
            since=row.completed_at,
        )
        for row in events.invalid_items(conn)
    ]
    return found


def dead_letter(conn: psycopg.Connection[Any], name: Name) -> Action | DeadEventRecord | None:
    """The whole record of a name (an event with its finished steps, or an action), or None."""
    if name.kind == "action":
        return ledger.action_by_key(conn, name.value)
    event = events.event_by_id(conn, name.event_id)
    if event is None:
        return None
    return DeadEventRecord(event, events.completions_of(conn, name.event_id))


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


def replay_actions(
    conn: psycopg.Connection[Any], keys: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """Give failed actions a fresh budget of attempts; the refused with why."""
    done: list[str] = []
    refused: dict[str, str] = {}
    for key in keys:
        action = ledger.action_by_key(conn, key)
        if action is None:
            refused[key] = "no such action"
        elif action.kind == "crm_lead":
            refused[key] = "a CRM Lead write is replayed with its event (event:<id>)"
        elif action.outcome != "failed":
            refused[key] = f"not a dead letter (outcome {action.outcome})"
        elif ledger.replay_action(conn, key):
            done.append(key)
        else:
            refused[key] = "changed while replaying; try again"
    return done, refused
