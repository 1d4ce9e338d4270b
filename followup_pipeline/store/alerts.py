"""What raised alerts, and which alert each went out in (``alerts``); ``followup alerts list``.

A row is recorded once per ``source`` (a sensor that looks twice records nothing new). A run
failure, a pending event or a silent ``evaluate`` goes out unless an alert of its fingerprint went
out within the window; then it is held, and the next alert of that fingerprint counts it.
A dead letter goes out in an alert of its own while fewer than a limit of them went out within
the window; past it, it is held, and the held ones go out together in one digest, at most one a
window (``record_dead_letters``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from followup_pipeline.domain.alerts import (
    AlertItem,
    AlertKind,
    alert_key,
    dead_letter_digest_key,
    dead_letter_key,
    key_stamp,
)
from followup_pipeline.store.db import fetch_all, fetch_one, storable
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class Signal:
    """Something that raises an alert: what it is, what raised it, and what makes repeats of it
    the same alert."""

    kind: AlertKind
    source: str
    fingerprint: str
    subject: str
    message: str
    occurred_at: datetime
    run_id: str | None = None
    #: Whom the alert goes to besides the operations list (a catch-up item's owner and backup).
    also_to: tuple[str, ...] = ()

    def params(self) -> dict[str, object]:
        return {
            "also_to": list(self.also_to),
            "kind": self.kind,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "subject": storable(self.subject, 500),
            "message": storable(self.message, 4000),
            "run_id": self.run_id,
            "occurred_at": self.occurred_at,
        }


@dataclass(frozen=True)
class Recorded:
    """A signal recorded: the key of the alert it goes out in, or None when it was held."""

    id: int
    key: str | None
    held: int = 0


@dataclass(frozen=True)
class Unsent:
    """An alert that reached nobody yet: its key, how long ago it was recorded, its attempts."""

    key: str
    first_id: int
    age_s: float
    attempts: int


@dataclass(frozen=True)
class AlertRow:
    """A row an alert is about."""

    id: int
    kind: AlertKind
    subject: str
    message: str
    run_id: str | None
    occurred_at: datetime
    held: int
    counted_in: str | None

    def item(self) -> AlertItem:
        return AlertItem(self.kind, self.subject, self.message, self.occurred_at, self.run_id)


@dataclass(frozen=True)
class Listed(AlertRow):
    """A line of ``followup alerts list``: a row, the alert it went out in, and how its mail
    and its ClickUp task ended."""

    action_key: str | None
    mail_outcome: str | None
    mail_error: str | None
    task_outcome: str | None
    task_ref: str | None
    task_error: str | None


@dataclass(frozen=True)
class PendingEvent:
    """The oldest event still pending."""

    id: int
    source: str
    event_type: str | None
    received_at: datetime
    attempts: int
    last_error: str | None


def record(
    conn: psycopg.Connection[Any], signal: Signal, *, window: timedelta | None
) -> Recorded | None:
    """Record ``signal`` once and decide, under a lock on its fingerprint: it opens a new alert
    (which counts the repeats held before it), or it is held because an alert of its fingerprint
    went out within ``window`` (no window: it always goes out). None when its source was
    recorded before."""
    with conn.transaction():
        conn.execute(query("alert_lock_fingerprint"), {"fingerprint": signal.fingerprint})
        row = conn.execute(query("alert_insert"), signal.params()).fetchone()
        if row is None:
            return None
        new_id = int(row["id"])
        last = (
            conn.execute(
                query("alert_last_sent"),
                {
                    "fingerprint": signal.fingerprint,
                    "since": signal.occurred_at - window,
                    "id": new_id,
                },
            ).fetchone()
            if window is not None
            else None
        )
        if last is not None:
            return Recorded(new_id, None)
        key = alert_key(signal.kind, signal.fingerprint, signal.occurred_at)
        counted = conn.execute(
            query("alert_count_held"),
            {"fingerprint": signal.fingerprint, "key": key, "id": new_id},
        ).fetchone()
        held = int(counted["held"]) if counted else 0
        conn.execute(query("alert_assign"), {"key": key, "ids": [new_id], "held": held})
        return Recorded(new_id, key, held)


#: The lock every decision about dead-letter alerts takes (their limit is shared by all).
#: How long after the last dead-letter mail the held ones go out in a digest.
DIGEST_EVERY = timedelta(hours=1)
DEAD_LETTERS_LOCK = "dead_letters"


def record_dead_letters(
    conn: psycopg.Connection[Any],
    signals: Sequence[Signal],
    *,
    at: datetime,
    limit: int,
    window: timedelta,
    known: bool = False,
) -> list[str]:
    """Record dead letters and decide, under one lock, which go out: each new one gets an alert
    of its own (``dead_letter_key``) while fewer than ``limit`` went out within ``window``
    before ``at``; the rest are held. Held ones go out together in one digest
    (``dead_letter_digest_key``) once no dead-letter mail went out for ``DIGEST_EVERY`` (an hour,
    or the window if shorter): a digest counts an hour's dead letters, and an outage of a day
    sends ``limit`` mails and then one digest an hour. Only ``at`` and the keys' stamps are
    compared (one clock). The keys of the new alerts. ``known``: the new ones were
    there before the checks first ran (an upgrade), and are recorded without an alert."""
    keys: list[str] = []
    since = key_stamp(at - window)
    with conn.transaction():
        conn.execute(query("alert_lock_fingerprint"), {"fingerprint": DEAD_LETTERS_LOCK})
        new: list[tuple[int, str]] = []
        for signal in signals:
            row = conn.execute(query("alert_insert"), signal.params()).fetchone()
            if row is not None:
                new.append((int(row["id"]), signal.subject))
        if known:
            conn.execute(query("alert_mark_known"), {"ids": [i for i, _ in new]})
            new = []
        went = conn.execute(query("dead_letter_alerts_since"), {"since": since}).fetchone()
        single = int(went["single"]) if went else 0
        for new_id, name in new[: max(0, limit - single)]:
            key = dead_letter_key([name], at)
            conn.execute(query("alert_assign"), {"key": key, "ids": [new_id], "held": 0})
            if key not in keys:  # one name that died twice since the last tick: one alert
                keys.append(key)
        every = min(window, DIGEST_EVERY)
        recent = conn.execute(
            # Keys stamp whole seconds: a mail exactly ``every`` ago is an hour old.
            query("dead_letter_alerts_since"),
            {"since": key_stamp(at - every + timedelta(seconds=1))},
        ).fetchone()
        if recent is not None and (int(recent["single"]) or int(recent["digests"])):
            return keys  # a dead-letter mail went out within the hour: the held ones wait
        held = conn.execute(query("dead_letters_held")).fetchall()
        if held:
            key = dead_letter_digest_key([str(r["subject"]) for r in held], at)
            ids = [int(r["id"]) for r in held]
            conn.execute(query("alert_assign"), {"key": key, "ids": ids, "held": 0})
            keys.append(key)
    return keys


def unsent(conn: psycopg.Connection[Any], *, limit: int = 500) -> list[Unsent]:
    """Alerts that reached nobody yet, newest first."""
    return fetch_all(conn, Unsent, query("alert_unsent"), {"limit": limit})


def count_unsent(conn: psycopg.Connection[Any]) -> int:
    """How many alerts reached nobody yet."""
    row = conn.execute(query("alert_count_unsent")).fetchone()
    return int(row["unsent"]) if row else 0


def recorded(conn: psycopg.Connection[Any], sources: Sequence[str]) -> set[str]:
    """Which of ``sources`` are recorded already."""
    rows = conn.execute(query("alerts_recorded"), {"sources": list(sources)}).fetchall()
    return {str(row["source"]) for row in rows}


@dataclass(frozen=True)
class OpenDegraded:
    """A job's degraded alert with no "recovered" one yet: its source and when it was raised."""

    job: str
    source: str
    occurred_at: datetime


def degraded_open(conn: psycopg.Connection[Any]) -> dict[str, OpenDegraded]:
    """Each job's degraded alert with no "recovered" one after it, by job."""
    rows = fetch_all(conn, OpenDegraded, query("alerts_degraded_open"))
    return {row.job: row for row in rows}


@dataclass(frozen=True)
class OpenStall:
    """A stall the watchdog alerted and that is not healed yet: its alert's source and time."""

    cause: str
    source: str
    subject: str
    occurred_at: datetime


#: How the keys of the watchdog's alerts begin (it sends them itself, not the ``alert`` job).
WATCHDOG_KEYS = ("alert:watchdog:", "alert:healed:")


@dataclass(frozen=True)
class FailedRun:
    """A failed run as its alert row has it: the job, its first error, the run."""

    job: str
    message: str
    run_id: str | None
    occurred_at: datetime


def run_failures(
    conn: psycopg.Connection[Any], *, since: datetime, until: datetime
) -> list[FailedRun]:
    """The failed runs recorded from ``since`` to ``until``, oldest first."""
    params = {"since": since, "until": until}
    return fetch_all(conn, FailedRun, query("alerts_run_failures"), params)


def stall_signal(
    cause_id: str, subject: str, message: str, *, since: datetime, at: datetime
) -> Signal:
    """A stall the watchdog (or, of the watchdog itself, the alert checks) found: fingerprint
    ``watchdog:<cause>``, source ``watchdog:<cause>:<since>`` (one alert per stall, which
    ``watchdog_open`` reads and a "healed" closes)."""
    return Signal(
        kind="watchdog",
        source=f"watchdog:{cause_id}:{key_stamp(since)}",
        fingerprint=f"watchdog:{cause_id}",
        subject=subject,
        message=message,
        occurred_at=at,
    )


def watchdog_open(conn: psycopg.Connection[Any]) -> dict[str, OpenStall]:
    """Each cause the watchdog alerted with no "healed" yet, by its id."""
    rows = fetch_all(conn, OpenStall, query("alerts_watchdog_open"))
    return {row.cause: row for row in rows}


def rows_of(conn: psycopg.Connection[Any], key: str) -> list[AlertRow]:
    """The rows the alert ``key`` is about."""
    return fetch_all(conn, AlertRow, query("alert_rows_of_key"), {"key": key})


def work_items_of(conn: psycopg.Connection[Any], key: str) -> list[int] | None:
    """The items of the work list the alert ``key`` is about; None when a row of it is about
    anything else (a failed run, a lag)."""
    rows = conn.execute(query("alert_sources_of_key"), {"key": key}).fetchall()
    items: list[int] = []
    for row in rows:
        kind, _, rest = str(row["source"]).partition(":")
        number = rest.split(":", 1)[0]
        if kind != "work" or not number.isdigit():
            return None
        items.append(int(number))
    return items or None


def also_to(conn: psycopg.Connection[Any], key: str) -> list[str]:
    """Whom the alert ``key`` goes to besides the operations list."""
    found = conn.execute(query("alert_also_to"), {"key": key}).fetchall()
    return [str(row["address"]) for row in found]


def held_since(conn: psycopg.Connection[Any], key: str) -> datetime | None:
    """When the oldest repeat counted by the alert ``key`` happened."""
    row = conn.execute(query("alert_held_since"), {"key": key}).fetchone()
    return row["since"] if row else None


def listed(conn: psycopg.Connection[Any], *, days: int | None) -> list[Listed]:
    """Alerts recorded in the last ``days`` (all with None), newest first."""
    return fetch_all(conn, Listed, query("alert_list"), {"days": days})


def oldest_pending_event(conn: psycopg.Connection[Any]) -> PendingEvent | None:
    """The oldest event still pending, if any."""
    return fetch_one(conn, PendingEvent, query("oldest_pending_event"))
