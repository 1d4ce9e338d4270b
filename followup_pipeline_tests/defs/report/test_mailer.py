"""Mail that goes out once: the ledger and Graph's Sent Items (the sandbox), real Postgres."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.engine.mailer import Mailer, MailError
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.outlook import KEY_PROPERTY, OutlookClient
from followup_pipeline.resources import PostgresResource
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.settings import load_settings
from followup_pipeline.store import ledger
from followup_pipeline.store.db import connection_kwargs
from followup_pipeline.store.ledger import ActionSpec
from followup_pipeline.store.run_lock import RunLock

SANDBOX = SandboxConfig()
KEY_FILTER = (
    "singleValueExtendedProperties/Any(ep: ep/id eq '" + KEY_PROPERTY + "' and ep/value eq '"
)
NOW = datetime(2026, 3, 2, 6, 30, tzinfo=UTC)
KEY = "report:morning:2026-03-02"
LOG = logging.getLogger("test.mailer")


@pytest.fixture
def outlook(sandbox: str) -> Iterator[OutlookClient]:
    client = OutlookClient(
        f"{sandbox}/login",
        f"{sandbox}/graph",
        SANDBOX.graph_tenant_id,
        SANDBOX.graph_client_id,
        SANDBOX.graph_client_secret.get_secret_value(),
        "followup@example.com",
        sleep=lambda _: None,
    )
    yield client
    client.close()


def _mailer(
    db_url: str, outlook: OutlookClient, sleeps: list[float] | None = None, **settings: Any
) -> Mailer:
    values = {"action_in_flight_s": 0, **settings}
    return Mailer(
        RunScope(NOW, "run-1", LOG),
        PostgresResource(url=db_url),
        outlook,
        load_settings(**values),
        sleep=(sleeps if sleeps is not None else []).append,
    )


def _outbox(sandbox: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=f"{sandbox}/_sandbox") as control:
        return list(control.get("/outbox").json()["messages"])


def _left_attempted(db_url: str, spec: ActionSpec, *, run_id: str) -> None:
    """The action committed `attempted` by a run that then died."""
    kwargs = connection_kwargs()
    with psycopg.connect(db_url, autocommit=True, **kwargs) as conn, conn.transaction():
        ledger.begin_attempt(conn, spec, started_at=NOW, run_id=run_id)


def _send(mailer: Mailer) -> Any:
    return mailer.send_once(
        key=KEY, kind="report", to=["team@example.com"], subject="Morning list", html="<p>x</p>"
    )


def test_mailer_sends_once_per_key(db_url: str, outlook: OutlookClient, sandbox: str) -> None:
    first = _send(_mailer(db_url, outlook))
    assert first.outcome == "sent"
    assert first.request_id
    again = _send(_mailer(db_url, outlook))
    assert again.outcome == "already_sent"
    [mail] = _outbox(sandbox)
    [prop] = mail["message"]["singleValueExtendedProperties"]
    assert prop["value"] == KEY


def test_mailer_a_send_that_went_out_and_answered_500_is_found_not_repeated(
    db_url: str, outlook: OutlookClient, sandbox: str, db: psycopg.Connection[Any]
) -> None:
    fault = {
        "vendor": "graph",
        "kind": "apply_then_error",
        "method": "POST",
        "path": "sendMail",
        "count": 1,
    }
    with httpx.Client(base_url=f"{sandbox}/_sandbox") as control:
        control.post("/faults", json=fault).raise_for_status()
    with pytest.raises(MailError):
        _send(_mailer(db_url, outlook))
    assert db.execute("SELECT outcome FROM actions").fetchone() == {"outcome": "unknown"}
    settled = _send(_mailer(db_url, outlook))
    assert settled.outcome == "already_sent"
    assert len(_outbox(sandbox)) == 1
    assert db.execute("SELECT outcome FROM actions").fetchone() == {"outcome": "accepted"}


def test_mailer_a_crash_after_the_202_before_our_commit_sends_nothing_twice(
    db_url: str, outlook: OutlookClient, sandbox: str
) -> None:
    # What a worker killed between Graph's 202 and our commit leaves behind: the action
    # committed `attempted`, the message sent with its key, no outcome recorded.
    spec = ActionSpec(key=KEY, kind="report", due_at=NOW, time_zone="Europe/Berlin")
    with (
        psycopg.connect(db_url, autocommit=True, **connection_kwargs()) as conn,
        conn.transaction(),
    ):
        ledger.begin_attempt(conn, spec, started_at=NOW, run_id="killed")
    outlook.send_mail(to=["team@example.com"], subject="Morning list", html="<p>x</p>", key=KEY)
    assert _send(_mailer(db_url, outlook)).outcome == "already_sent"
    assert len(_outbox(sandbox)) == 1


def test_mailer_an_attempt_not_in_sent_items_is_sent_and_a_young_one_waits(
    db_url: str, outlook: OutlookClient, sandbox: str
) -> None:
    spec = ActionSpec(key=KEY, kind="report", due_at=NOW, time_zone="Europe/Berlin")
    with (
        psycopg.connect(db_url, autocommit=True, **connection_kwargs()) as conn,
        conn.transaction(),
    ):
        ledger.begin_attempt(conn, spec, started_at=NOW, run_id="died-before-sending")
    # Within the in-flight window the request may still be on its way: left alone.
    assert _send(_mailer(db_url, outlook, action_in_flight_s=3600)).outcome == "in_flight"
    assert _outbox(sandbox) == []
    assert _send(_mailer(db_url, outlook)).outcome == "sent"
    assert len(_outbox(sandbox)) == 1


def test_mailer_dry_run_records_and_sends_nothing(
    db_url: str, outlook: OutlookClient, sandbox: str, db: psycopg.Connection[Any]
) -> None:
    assert _send(_mailer(db_url, outlook, dry_run=True)).outcome == "suppressed"
    assert _outbox(sandbox) == []
    row = db.execute("SELECT outcome, reason FROM actions").fetchone()
    assert row == {"outcome": "suppressed", "reason": "dry_run"}


def test_mailer_key_with_a_quote_is_found_in_sent_items(outlook: OutlookClient) -> None:
    key = "report:morning:it's-2026"
    assert outlook.find_sent(key) is None
    outlook.send_mail(to=["team@example.com"], subject="s", html="<p>x</p>", key=key)
    assert outlook.find_sent(key) is not None
    assert outlook.find_sent("report:morning:other") is None


def test_mailer_a_second_run_sending_the_same_window_at_once_leaves_it_alone(
    db_url: str, outlook: OutlookClient, sandbox: str
) -> None:
    # The first run holds the window's lock while it sends (here: held by hand, as a run would).
    held = RunLock.try_take(db_url, f"mail:{KEY}", owner="first-run")
    try:
        assert held.held
        assert _send(_mailer(db_url, outlook)).outcome == "in_flight"
        assert _outbox(sandbox) == []
    finally:
        held.release()
    assert _send(_mailer(db_url, outlook)).outcome == "sent"


def test_mailer_a_retry_soon_after_an_ambiguous_send_waits_out_the_window_then_settles(
    db_url: str, outlook: OutlookClient, sandbox: str
) -> None:
    spec = ActionSpec(key=KEY, kind="report", due_at=NOW, time_zone="Europe/Berlin")
    _left_attempted(db_url, spec, run_id="failed-run")
    sleeps: list[float] = []
    # A run retry seconds later: the 100 s window is waited out, then the mailbox is asked.
    result = _send(_mailer(db_url, outlook, sleeps, action_in_flight_s=100))
    assert result.outcome == "sent"
    assert len(sleeps) == 1
    assert 90 < sleeps[0] <= 100
    assert len(_outbox(sandbox)) == 1


def test_mailer_multipart_a_draft_left_by_a_failed_send_is_not_taken_for_a_sent_mail(
    db_url: str, outlook: OutlookClient, sandbox: str
) -> None:
    # The draft is created and keyed, then its send answers 500 without sending.
    fault = {"vendor": "graph", "kind": "error", "status": 500, "path": "/send$", "count": 1}
    with httpx.Client(base_url=f"{sandbox}/_sandbox") as control:
        control.post("/faults", json=fault).raise_for_status()
    mailer = _mailer(db_url, outlook)
    message = {"to": ["team@example.com"], "subject": "Morning list", "html": "<p>x</p>"}
    with pytest.raises(MailError):
        mailer.send_once(key=KEY, kind="report", text="x", **message)
    assert _outbox(sandbox) == []
    # The draft carries the key (the PATCH took), yet it is no sent mail.
    listing = httpx.get(
        f"{sandbox}/graph/v1.0/users/followup@example.com/messages",
        params={"$filter": f"{KEY_FILTER}{KEY}')"},
        headers={"Authorization": f"Bearer {outlook.access_token()}"},
    ).json()["value"]
    assert [m["isDraft"] for m in listing] == [True]
    assert outlook.find_sent(KEY) is None
    assert mailer.send_once(key=KEY, kind="report", text="x", **message).outcome == "sent"
    [mail] = _outbox(sandbox)
    assert mail["message"]["textBody"].strip() == "x"
    assert mail["message"]["body"]["content"].strip() == "<p>x</p>"


def test_mailer_settling_keeps_what_the_run_that_sent_recorded(
    db_url: str, outlook: OutlookClient, sandbox: str, db: psycopg.Connection[Any]
) -> None:
    fault = {"vendor": "graph", "kind": "apply_then_error", "path": "sendMail", "count": 1}
    with httpx.Client(base_url=f"{sandbox}/_sandbox") as control:
        control.post("/faults", json=fault).raise_for_status()
    message = {"to": ["team@example.com"], "subject": "Morning list", "html": "<p>x</p>"}
    with pytest.raises(MailError):
        _mailer(db_url, outlook).send_once(
            key=KEY, kind="report", payload={"until": "2026-03-02T06:30:00+00:00"}, **message
        )
    later = _mailer(db_url, outlook)
    later.now = NOW + timedelta(hours=5)
    settled = later.send_once(
        key=KEY, kind="report", payload={"until": "2026-03-02T11:30:00+00:00"}, **message
    )
    assert settled.outcome == "already_sent"
    row = db.execute("SELECT outcome, payload FROM actions").fetchone()
    # The next report's "since" is when the mail that went out was rendered, not the settling.
    assert row == {"outcome": "accepted", "payload": {"until": "2026-03-02T06:30:00+00:00"}}
