"""The action ledger (``actions``, ``action_attempts``): every outbound effect as one row keyed by
its idempotency key.

The row says ``attempted`` (committed) before the provider is called and ``accepted`` with the
provider's id after; ``confirmed`` once the object was read back. A row left ``attempted`` or
``unknown`` is resolved by asking the provider first (docs/architecture.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from followup_pipeline.store.db import fetch_all, fetch_one, require_transaction, storable
from followup_pipeline.store.queries import query

Kind = Literal[
    "task",
    "close_task",
    "task_update",
    "report",
    "alert",
    "crm_lead",
    "reminder",
    "certificate",
    "publication",
]
FinalOutcome = Literal["accepted", "confirmed", "failed", "unknown"]
SuppressReason = Literal[
    "deal_closed",
    "superseded",
    "paused",
    "dry_run",
    "nothing_due",
    "shadow",
    "completed",
    "opted_out",
    "expired",
    "decided",
]
#: Outcomes of an action that may have reached the provider: ask it before anything else.
MAYBE_DONE = ("attempted", "unknown", "accepted")


@dataclass(frozen=True)
class Action:
    """A row of ``actions``."""

    id: int
    idempotency_key: str
    kind: str
    watch_id: int | None
    step_no: int | None
    due_at: datetime
    time_zone: str
    outcome: str
    reason: str | None
    provider_ref: str | None
    payload: dict[str, object]
    attempts: int
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    replayed_attempts: int

    def is_dead(self, *, max_attempts: int) -> bool:
        """Failed with no attempt left since its last replay: it waits for an operator."""
        return self.outcome == "failed" and self.attempts - self.replayed_attempts >= max_attempts


@dataclass(frozen=True)
class ActionSpec:
    """What an action is, independent of how it turns out."""

    key: str
    kind: Kind
    due_at: datetime
    time_zone: str
    watch_id: int | None = None
    step_no: int | None = None
    payload: dict[str, object] | None = None

    def params(self) -> dict[str, object]:
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


def action_by_key(conn: psycopg.Connection[Any], key: str) -> Action | None:
    """The ledger row of ``key``, if any."""
    return fetch_one(conn, Action, query("action_by_key"), {"key": key})


def age_s(conn: psycopg.Connection[Any], action_id: int) -> float:
    """Seconds since the action last changed, by the database's real time."""
    row = conn.execute(query("action_age"), {"id": action_id}).fetchone()
    return float(row["age_s"]) if row else 0.0


def touch(conn: psycopg.Connection[Any], action_id: int) -> None:
    """Stamp the action with the database's real time: its request leaves now."""
    conn.execute(query("action_touch"), {"id": action_id})


def actions_of_watch(conn: psycopg.Connection[Any], watch_id: int) -> dict[int, Action]:
    """The task actions of a watch, keyed by step number."""
    rows = fetch_all(conn, Action, query("actions_of_watch"), {"watch_id": watch_id})
    return {row.step_no: row for row in rows if row.step_no is not None}


def dead_actions(conn: psycopg.Connection[Any], *, max_attempts: int) -> list[Action]:
    """Actions that failed ``max_attempts`` times since their last replay, oldest change first."""
    return fetch_all(conn, Action, query("actions_failed"), {"max_attempts": max_attempts})


def begin_attempt(
    conn: psycopg.Connection[Any], spec: ActionSpec, *, started_at: datetime, run_id: str | None
) -> Attempt | None:
    """Mark the action attempted and keep the attempt; None if it already reached the provider.

    Call inside a transaction, and commit it before calling the provider.
    """
    require_transaction(conn, "begin_attempt")
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
    """Record how an attempt ended, on the attempt and on the action.

    Call inside a transaction: the two rows change together.
    """
    require_transaction(conn, "finish_attempt")
    params = {
        "action_id": attempt.action_id,
        "attempt_no": attempt.attempt_no,
        "outcome": outcome,
        "provider_ref": provider_ref,
        "error": storable(error) if error is not None else None,
        "finished_at": finished_at,
    }
    conn.execute(query("finish_action"), params)
    conn.execute(query("finish_attempt"), params)


def suppress(conn: psycopg.Connection[Any], spec: ActionSpec, *, reason: SuppressReason) -> bool:
    """Record the action as suppressed for ``reason``; False if it had reached the provider."""
    row = conn.execute(query("suppress_action"), {**spec.params(), "reason": reason}).fetchone()
    return row is not None


def confirm(conn: psycopg.Connection[Any], key: str, provider_ref: str | None) -> bool:
    """Record that the provider's object of ``key`` was read back (``confirmed``)."""
    params = {"key": key, "provider_ref": provider_ref}
    return conn.execute(query("action_confirm"), params).fetchone() is not None


def decide(conn: psycopg.Connection[Any], key: str) -> bool:
    """A person closed the dead action ``key`` with a reason: suppressed (``decided``); False
    if it is no longer failed."""
    return conn.execute(query("action_decided"), {"key": key}).fetchone() is not None


def replay_action(conn: psycopg.Connection[Any], key: str) -> bool:
    """Give a failed action a fresh budget of attempts; False if it changed meanwhile."""
    return conn.execute(query("action_replay"), {"key": key}).fetchone() is not None
