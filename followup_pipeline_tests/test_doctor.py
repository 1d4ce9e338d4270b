"""``followup doctor``: the ClickUp list's closed status, and webhooks that stopped coming."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.commands.core import webhook_line
from followup_pipeline.sandbox.config import SandboxConfig

SANDBOX = SandboxConfig()
NOW = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)


def _sandbox_credentials(monkeypatch: pytest.MonkeyPatch, sandbox: str, db_url: str) -> None:
    values = {
        "FOLLOWUP_DATABASE_URL": db_url,
        "FOLLOWUP_ESPOCRM_URL": f"{sandbox}/espocrm",
        "FOLLOWUP_CLICKUP_URL": f"{sandbox}/clickup/api",
        "FOLLOWUP_ESPOCRM_API_KEY": SANDBOX.espocrm_api_key.get_secret_value(),
        "FOLLOWUP_CLICKUP_TOKEN": SANDBOX.clickup_token.get_secret_value(),
        "FOLLOWUP_GRAPH_CLIENT_SECRET": SANDBOX.graph_client_secret.get_secret_value(),
        "FOLLOWUP_MISTRAL_API_KEY": SANDBOX.mistral_api_key.get_secret_value(),
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def test_doctor_reads_the_lists_closed_status(
    sandbox: str, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _sandbox_credentials(monkeypatch, sandbox, db_url)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "clickup: list sandbox-list closes tasks with status 'complete'" in out


def test_doctor_fails_on_a_closed_status_the_list_does_not_have(
    sandbox: str, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _sandbox_credentials(monkeypatch, sandbox, db_url)
    monkeypatch.setenv("FOLLOWUP_CLICKUP_CLOSED_STATUS", "closed")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "clickup: FAILED: FOLLOWUP_CLICKUP_CLOSED_STATUS 'closed' is no closed-type" in out
    assert "(closed-type: 'complete')" in out


def _reconciled_watch(db: psycopg.Connection[Any], at: datetime) -> None:
    db.execute(
        "INSERT INTO watches (subject_id, subject_name, stage, cadence_name, offsets, time_zone,"
        " base_on, registered_at, registered_by) VALUES ('d1', 'Offer', 'Proposal', 'default',"
        " '{5,12,21}', 'Europe/Berlin', %s, %s, 'reconcile')",
        (at.date(), at),
    )


def test_doctor_explains_webhooks_that_stopped_while_deals_change(
    db: psycopg.Connection[Any],
) -> None:
    assert "the CRM's watched deals did not change either" in webhook_line(db, now=NOW)
    _reconciled_watch(db, NOW - timedelta(hours=3))
    line = webhook_line(db, now=NOW)
    assert line.startswith("webhooks: WARNING: none for a day while reconciliation opened 1")
    assert "webhookAllowedAddressList" in line
    db.execute(
        "INSERT INTO events (source, event_type, dedup_key, body, received_at)"
        " VALUES ('espocrm', 'Opportunity.create', 'k', '\\x5b5d', %s)",
        (NOW - timedelta(hours=1),),
    )
    assert webhook_line(db, now=NOW).startswith("webhooks: the last one arrived")
