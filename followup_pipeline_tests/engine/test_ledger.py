"""The engine's action ledger: one door to a provider, and a dry run shut at that door."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from followup_pipeline.engine.ledger import ActionLedger, DryRun
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.resources import PostgresResource
from followup_pipeline.store.ledger import ActionSpec, Kind

NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)


def _ledger(db_url: str, *, dry_run: bool) -> ActionLedger:
    run = RunScope(NOW, "run-1", logging.getLogger("test.ledger"))
    postgres = PostgresResource(url=db_url)
    return ActionLedger(postgres, run, in_flight_s=0, max_attempts=3, dry_run=dry_run)


@pytest.mark.parametrize("kind", ["task", "close_task", "report", "alert"])
def test_ledger_a_dry_run_suppresses_every_kind_at_the_one_door(
    db_url: str, db: psycopg.Connection[Any], kind: Kind, caplog: pytest.LogCaptureFixture
) -> None:
    spec = ActionSpec(key=f"{kind}:1", kind=kind, due_at=NOW, time_zone="Europe/Berlin")
    with caplog.at_level(logging.WARNING), pytest.raises(DryRun):
        _ledger(db_url, dry_run=True).begin(spec)
    row = db.execute("SELECT outcome, reason, attempts FROM actions").fetchone()
    assert row == {"outcome": "suppressed", "reason": "dry_run", "attempts": 0}
    assert db.execute("SELECT count(*) AS n FROM action_attempts").fetchone() == {"n": 0}
    assert f"DRY RUN: {kind}:1" in caplog.text


def test_ledger_a_live_run_attempts_and_a_dry_run_after_it_changes_nothing_sent(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    spec = ActionSpec(key="report:morning:1", kind="report", due_at=NOW, time_zone="UTC")
    live = _ledger(db_url, dry_run=False)
    attempt = live.begin(spec)
    assert attempt is not None
    live.finish(attempt, "accepted", provider_ref="r-1")
    # What reached the provider stays as it is: a dry run cannot suppress it.
    with pytest.raises(DryRun):
        _ledger(db_url, dry_run=True).begin(spec)
    row = db.execute("SELECT outcome, provider_ref FROM actions").fetchone()
    assert row == {"outcome": "accepted", "provider_ref": "r-1"}
