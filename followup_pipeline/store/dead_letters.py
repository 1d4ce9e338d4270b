"""Dead letters by name: ``event:<id>`` (the event log) and ``action:<key>`` (the action ledger).

Replaying an event puts it back to ``pending`` under its original id with fresh attempts, so the
steps it finished before (``step_completions``) are skipped. An ``unhandled`` event is replayable
once its source has a handler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from followup_pipeline.store.events import HANDLED_SOURCES
from followup_pipeline.store.ledger import action_by_key
from followup_pipeline.store.queries import query

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


def dead_letters(conn: psycopg.Connection[Any], *, max_attempts: int) -> list[dict[str, Any]]:
    """Every dead letter, events first: name, when, attempts, step and last error.

    An action is dead once it failed ``max_attempts`` times since its last replay.
    """
    found = [
        {
            "name": f"event:{row['id']}",
            "at": row["received_at"],
            "what": f"{row['source']} {row['event_type'] or ''}".strip(),
            "attempts": row["attempts"],
            "step": row["dead_step"],
            "error": row["last_error"],
        }
        for row in conn.execute(query("events_dead_letters")).fetchall()
    ]
    found += [
        {
            "name": f"action:{row['idempotency_key']}",
            "at": row["updated_at"],
            "what": row["kind"],
            "attempts": row["attempts"],
            "step": None,
            "error": row["last_error"],
        }
        for row in conn.execute(query("actions_failed"), {"max_attempts": max_attempts}).fetchall()
    ]
    return found


def dead_letter(conn: psycopg.Connection[Any], name: Name) -> dict[str, Any] | None:
    """The whole record of a name (an event with its finished steps), or None."""
    if name.kind == "action":
        return action_by_key(conn, name.value)
    row = conn.execute(query("event_by_id"), {"id": name.event_id}).fetchone()
    if row is None:
        return None
    steps = conn.execute(query("step_completions_of_event"), {"event_id": name.event_id})
    return {**row, "body": bytes(row["body"]), "steps": list(steps.fetchall())}


def requeue_events(
    conn: psycopg.Connection[Any], ids: Sequence[int]
) -> tuple[list[int], dict[int, str]]:
    """Put dead (or now handled, unhandled) events back to pending; the refused with why."""
    done: list[int] = []
    refused: dict[int, str] = {}
    with conn.transaction():
        for event_id in ids:
            row = conn.execute(query("event_by_id"), {"id": event_id}).fetchone()
            if row is None:
                refused[event_id] = "no such event"
            elif row["status"] not in ("dead", "unhandled"):
                refused[event_id] = f"not a dead letter (status {row['status']})"
            elif row["source"] not in HANDLED_SOURCES:
                refused[event_id] = f"source {row['source']!r} has no handler yet"
            elif conn.execute(query("events_requeue"), {"id": event_id}).fetchone():
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
        row = action_by_key(conn, key)
        if row is None:
            refused[key] = "no such action"
        elif row["outcome"] != "failed":
            refused[key] = f"not a dead letter (outcome {row['outcome']})"
        elif conn.execute(query("action_replay"), {"key": key}).fetchone():
            done.append(key)
        else:
            refused[key] = "changed while replaying; try again"
    return done, refused
