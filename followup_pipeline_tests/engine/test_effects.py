"""The one way an action goes out (engine/effects.py), driven by a fake sender through every
branch on a real ledger: dead, done, in flight, ambiguous then found or not, unreadable, dry run,
shadow, a tenant off, failure (ambiguous or not), success, read back or not."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from followup_pipeline.engine.effects import ERROR_MAX, Mode, Outbound, Sent
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.errors import IntegrationError, PermanentError, TransientError
from followup_pipeline.resources import PostgresResource
from followup_pipeline.store.ledger import ActionSpec

NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)
SPEC = ActionSpec(key="task:1:1", kind="task", due_at=NOW, time_zone="Europe/Berlin")


@dataclass
class FakeSender:
    """A provider in memory: what it holds by key, and what it answers."""

    searchable: bool = True
    searches_first: bool = False
    may_be_ambiguous: bool = True
    holds: dict[str, str] = field(default_factory=dict)
    look_up_fails: bool = False
    fails_with: IntegrationError | None = None
    shows: bool | None = True
    calls: list[str] = field(default_factory=list)
    mirrored: list[str] = field(default_factory=list)

    def look_up(self, spec: ActionSpec) -> str | None:
        self.calls.append("look_up")
        if self.look_up_fails:
            raise TransientError("search timed out", vendor="fake")
        return self.holds.get(spec.key)

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        self.calls.append("perform")
        touch()
        if self.fails_with is not None:
            raise self.fails_with
        self.holds[spec.key] = "ref-new"
        return "ref-new"

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        self.calls.append("read_back")
        return self.shows

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        self.mirrored.append(sent.state)


@dataclass(frozen=True)
class Case:
    """Before the send (the row's outcome, by the ledger), the sender, the mode; after."""

    before: str | None
    sender: FakeSender
    state: str
    outcome: str | None
    calls: list[str]
    mirrored: list[str]
    mode: Mode = "live"
    dry_run: bool = False
    in_flight_s: float = 0.0


AMBIGUOUS = TransientError("HTTP 502", vendor="fake", ambiguous=True)
CASES = {
    "success, read back": Case(None, FakeSender(), "confirmed", "confirmed",
                               ["perform", "read_back"], ["sent", "confirmed"]),
    "success, not read back": Case(None, FakeSender(shows=False), "sent", "accepted",
                                   ["perform", "read_back"], ["sent"]),
    "success, nothing to read": Case(None, FakeSender(shows=None), "sent", "accepted",
                                     ["perform", "read_back"], ["sent"]),
    "failure": Case(None, FakeSender(fails_with=PermanentError("HTTP 400", vendor="fake")),
                    "failed", "failed", ["perform"], []),
    "failure, maybe done": Case(None, FakeSender(fails_with=AMBIGUOUS), "failed", "unknown",
                                ["perform"], []),
    "failure, a PUT never unknown": Case(
        None, FakeSender(fails_with=AMBIGUOUS, may_be_ambiguous=False), "failed", "failed",
        ["perform"], []),
    "dead": Case("dead", FakeSender(), "dead", "failed", [], []),
    "done": Case("accepted", FakeSender(), "done", "accepted", [], []),
    "in flight": Case("unknown", FakeSender(), "in_flight", "unknown", [], [], in_flight_s=3600),
    "ambiguous, then found": Case("unknown", FakeSender(holds={SPEC.key: "ref-old"}), "found",
                                  "confirmed", ["look_up"], ["found"]),
    "ambiguous, then not found": Case("unknown", FakeSender(), "confirmed", "confirmed",
                                      ["look_up", "perform", "read_back"], ["sent", "confirmed"]),
    "ambiguous, unreadable": Case("unknown", FakeSender(look_up_fails=True), "unreadable",
                                  "unknown", ["look_up"], []),
    "ambiguous, not searchable": Case("unknown", FakeSender(searchable=False), "confirmed",
                                      "confirmed", ["perform", "read_back"], ["sent", "confirmed"]),
    "searched first, found": Case(None, FakeSender(searches_first=True, holds={SPEC.key: "r"}),
                                  "found", "confirmed", ["look_up"], ["found"]),
    "dry run": Case(None, FakeSender(), "suppressed", "suppressed", [], ["suppressed"],
                    dry_run=True),
    "shadow": Case(None, FakeSender(), "suppressed", "suppressed", [], ["suppressed"],
                   mode="shadow"),
    "a tenant dry": Case(None, FakeSender(), "suppressed", "suppressed", [], ["suppressed"],
                         mode="dry"),
    "a tenant off": Case(None, FakeSender(), "off", None, [], [], mode="off"),
    # A dry run never overwrites what may have reached the provider: left for a live run.
    "dry run over a lost answer": Case("unknown", FakeSender(searchable=False), "in_flight",
                                       "unknown", [], [], dry_run=True),
}  # fmt: skip


def _ledger(db_url: str, *, dry_run: bool = False, in_flight_s: float = 0.0) -> ActionLedger:
    run = RunScope(NOW, "run-1", logging.getLogger("test.effects"))
    return ActionLedger(
        PostgresResource(url=db_url), run, in_flight_s=in_flight_s, max_attempts=2,
        dry_run=dry_run,
    )  # fmt: skip


def _before(ledger: ActionLedger, state: str | None) -> None:
    """Put the action in ``state`` as earlier attempts would have."""
    if state is None:
        return
    for _ in range(2 if state == "dead" else 1):
        attempt = ledger.begin(SPEC)
        assert attempt is not None
        if state == "accepted":
            ledger.finish(attempt, "accepted", provider_ref="ref-old")
        else:
            ledger.fail(attempt, "HTTP 502", maybe_done=state == "unknown")


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_effects_every_branch_of_the_one_way_out(
    case: Case, db_url: str, db: psycopg.Connection[Any]
) -> None:
    _before(_ledger(db_url), case.before)
    ledger = _ledger(db_url, dry_run=case.dry_run, in_flight_s=case.in_flight_s)
    sent = Outbound(ledger).send(SPEC, case.sender, mode=case.mode)
    assert sent.state == case.state
    assert case.sender.calls == case.calls
    assert case.sender.mirrored == case.mirrored
    row = db.execute("SELECT outcome, reason, last_error FROM actions").fetchone()
    assert (row["outcome"] if row else None) == case.outcome
    if case.state == "suppressed":
        assert row is not None
        assert row["reason"] == ("dry_run" if case.dry_run or case.mode == "dry" else "shadow")
    if case.state == "failed":
        assert sent.error is case.sender.fails_with
        assert row is not None
        assert row["last_error"] == str(case.sender.fails_with)[:ERROR_MAX]
    if case.before == "unknown" and case.state in ("confirmed", "found"):
        attempts = db.execute("SELECT outcome FROM action_attempts ORDER BY attempt_no")
        outcomes = [a["outcome"] for a in attempts]
        if case.state == "found":  # the lost attempt took effect: it is confirmed, no new one
            assert outcomes == ["confirmed"]
        else:
            first = "failed" if case.sender.searchable else "unknown"
            assert outcomes[0] == first


def test_effects_an_attempt_is_stamped_with_the_run_and_its_error_cut(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    long = PermanentError("x" * 2000, vendor="fake")
    sent = Outbound(_ledger(db_url)).send(SPEC, FakeSender(fails_with=long))
    assert sent.state == "failed"
    row = db.execute("SELECT run_id, error FROM action_attempts").fetchone()
    assert row is not None
    assert row["run_id"] == "run-1"
    assert len(row["error"]) == ERROR_MAX


def test_effects_a_send_waits_out_a_short_window_and_a_suppress_never_hides_a_send(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    _before(_ledger(db_url), "unknown")
    waited: list[float] = []
    outbound = Outbound(_ledger(db_url, in_flight_s=3600), sleep=waited.append)
    assert outbound.send(SPEC, FakeSender(), wait_s=60).state == "in_flight"  # too long a wait
    assert waited == []
    db.execute("UPDATE actions SET updated_at = now() - interval '3590 seconds'")
    sender = FakeSender(holds={SPEC.key: "ref-old"})
    assert outbound.send(SPEC, sender, wait_s=60).state == "found"
    assert 0 < waited[0] <= 10
    # Suppressed for a reason of the sender's: not once the provider has it.
    assert outbound.suppress(SPEC, sender, "completed").state == "done"
    other = ActionSpec(key="task:1:2", kind="task", due_at=NOW, time_zone="UTC")
    assert outbound.suppress(other, sender, "completed").state == "suppressed"
    assert sender.mirrored == ["found", "suppressed"]


def test_effects_a_settle_that_will_not_send_leaves_a_lost_attempt_lost(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    _before(_ledger(db_url), "unknown")
    outbound = Outbound(_ledger(db_url))
    assert outbound.settle(SPEC, FakeSender(), conclude=False) is None  # not there (yet)
    assert db.execute("SELECT outcome FROM actions").fetchone() == {"outcome": "unknown"}
    assert outbound.settle(SPEC, FakeSender()) is None  # a sender that will send: concluded
    assert db.execute("SELECT outcome FROM actions").fetchone() == {"outcome": "failed"}
