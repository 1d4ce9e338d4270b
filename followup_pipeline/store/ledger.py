"""The action ledger: every outbound effect as one row keyed by its idempotency key.

The row says ``attempted`` (committed) before the provider is called and ``accepted`` with the
provider's id after; ``confirmed`` once the object was read back. A row left ``attempted`` or
``unknown`` is resolved by asking the provider first (ARCHITECTURE.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from followup_pipeline.store.queries import query

Kind = Literal["task", "close_task", "report", "alert"]
FinalOutcome = Literal["accepted", "confirmed", "failed", "unknown"]
SuppressReason = Literal["deal_closed", "superseded", "paused", "dry_run"]


@dataclass(frozen=True)
class ActionSpec:
    """What an action is, independent of how it turns out."""

    key: str
    kind: Kind
    due_at: datetime
    time_zone: str
    watch_id: int | None = None
    step_no: int | None = None
    payload: dict[str, Any] | None = None

    def params(self) -> dict[str, Any]:
        """Query parameters of the spec."""
        return {
            "key": self.key,
            "kind": self.kind,
            "watch_id": self.watch_id,
            "step_no": self.step_no,
            "due_at": self.due_at,
            "time_zone": self.time_zone,
            "payload": Jsonb(self.payload or {}),
        }


@dataclass(frozen=True)
class Attempt:
    """An attempt in progress: the action's id and the attempt's number."""

    action_id: int
    attempt_no: int


def action_by_key(conn: psycopg.Connection[Any], key: str) -> dict[str, Any] | None:
    """The ledger row of ``key``, if any."""
    row: dict[str, Any] | None = conn.execute(query("action_by_key"), {"key": key}).fetchone()
    return row


def is_dead(action: dict[str, Any] | None, *, max_attempts: int) -> bool:
    """A failed action with no attempt left since its last replay: it waits for an operator."""
    if action is None or action["outcome"] != "failed":
        return False
    return int(action["attempts"]) - int(action["replayed_attempts"]) >= max_attempts


def begin_attempt(
    conn: psycopg.Connection[Any], spec: ActionSpec, *, started_at: datetime, run_id: str | None
) -> Attempt | None:
    """Mark the action attempted and keep the attempt; None if it already reached the provider.

    The caller commits before calling the provider.
    """
    with conn.transaction():
        row = conn.execute(query("begin_action_attempt"), spec.params()).fetchone()
        if row is None:
            return None
        attempt = Attempt(action_id=int(row["id"]), attempt_no=int(row["attempts"]))
        conn.execute(
            query("insert_attempt"),
            {
                "action_id": attempt.action_id,
                "attempt_no": attempt.attempt_no,
                "started_at": started_at,
                "run_id": run_id,
            },
        )
    return attempt


def finish_attempt(
    conn: psycopg.Connection[Any],
    attempt: Attempt,
    *,
    outcome: FinalOutcome,
    finished_at: datetime,
    provider_ref: str | None = None,
    error: str | None = None,
) -> None:
    """Record how an attempt ended, on the attempt and on the action."""
    params = {
        "action_id": attempt.action_id,
        "attempt_no": attempt.attempt_no,
        "outcome": outcome,
        "provider_ref": provider_ref,
        "error": error,
        "finished_at": finished_at,
    }
    with conn.transaction():
        conn.execute(query("finish_action"), params)
        conn.execute(query("finish_attempt"), params)


def suppress(conn: psycopg.Connection[Any], spec: ActionSpec, *, reason: SuppressReason) -> bool:
    """Record the action as suppressed for ``reason``; False if it had reached the provider."""
    row = conn.execute(query("suppress_action"), {**spec.params(), "reason": reason}).fetchone()
    return row is not None
