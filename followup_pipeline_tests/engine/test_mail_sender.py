"""Graph's part of a mail (``GraphMail``: look-up, send, read-back, mirror) against the
sandbox's Graph, without the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.engine.effects import ActionSpec, Sent
from followup_pipeline.engine.mailer import GraphMail, Letter
from followup_pipeline.integrations.errors import TransientError
from followup_pipeline.integrations.outlook import KEY_PROPERTY, OutlookClient
from followup_pipeline.sandbox.config import SandboxConfig

SANDBOX = SandboxConfig()
SPEC = ActionSpec(
    key="report:morning:2026-03-02",
    kind="report",
    due_at=datetime(2026, 3, 2, 6, 30, tzinfo=UTC),
    time_zone="Europe/Berlin",
)
HTML_ONLY = Letter(["team@example.com"], "Morning list", "<p>x</p>")
MULTIPART = Letter(["team@example.com"], "Morning list", "<p>x</p>", text="x")


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


def _outbox(sandbox: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=f"{sandbox}/_sandbox", timeout=10) as control:
        return list(control.get("/outbox").json()["messages"])


@pytest.mark.parametrize("letter", [HTML_ONLY, MULTIPART], ids=["html", "multipart"])
def test_graph_mail_sends_after_touch_and_finds_it_by_its_key(
    letter: Letter, outlook: OutlookClient, sandbox: str
) -> None:
    mail = GraphMail(outlook, letter)
    assert mail.look_up(SPEC) is None
    outbox_at_touch: list[int] = []
    request_id = mail.perform(SPEC, lambda: outbox_at_touch.append(len(_outbox(sandbox))))
    assert outbox_at_touch == [0]  # touched once, before the request that sends
    assert request_id
    [sent] = _outbox(sandbox)
    assert sent["message"]["singleValueExtendedProperties"] == [
        {"id": KEY_PROPERTY, "value": SPEC.key}
    ]
    assert mail.look_up(SPEC) is not None
    assert mail.read_back(SPEC, request_id) is None  # a 202: nothing to read yet


def test_graph_mail_a_send_that_went_and_answered_500_may_have_gone_and_is_found(
    outlook: OutlookClient, sandbox: str
) -> None:
    fault = {"vendor": "graph", "kind": "apply_then_error", "path": "sendMail", "count": 1}
    with httpx.Client(base_url=f"{sandbox}/_sandbox", timeout=10) as control:
        control.post("/faults", json=fault).raise_for_status()
    mail = GraphMail(outlook, HTML_ONLY)
    with pytest.raises(TransientError) as failed:
        mail.perform(SPEC, lambda: None)
    assert failed.value.ambiguous
    assert mail.look_up(SPEC) is not None


def test_graph_mail_mirrors_nothing(outlook: OutlookClient, db: psycopg.Connection[Any]) -> None:
    GraphMail(outlook, HTML_ONLY).mirror(db, SPEC, Sent("sent", "request-1"))
    assert db.execute("SELECT count(*) AS n FROM actions").fetchone() == {"n": 0}
