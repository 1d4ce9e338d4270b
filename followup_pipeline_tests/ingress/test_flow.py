"""Webhook to watch over real HTTP: a crash before the answer, redeliveries, poison, replay."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.cli import main as followup
from followup_pipeline.ingress import create_app
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.sandbox import SandboxConfig
from followup_pipeline.sandbox import create_app as create_sandbox
from followup_pipeline_tests.support import registering, served

from .conftest import (
    CREATE_HOOK,
    DELETE_HOOK,
    STAGE_HOOK,
    espocrm_delivery,
    ingress_settings,
)

#: ``create`` items carry every name: registration does not need to ask the CRM.
UNUSED_CRM = EspoCrmClient("http://127.0.0.1:9", "k")
DEAL = {"id": "d1", "name": "Offer", "stage": "Proposal", "accountName": "ACME"}


def _watches(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(db.execute("SELECT * FROM watches ORDER BY id").fetchall())


class CrashBeforeAnswer:
    """Wraps the ingress: the first webhook is stored and committed, then the answer is lost."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.crashed = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.crashed:
            await self.app(scope, receive, send)
            return
        self.crashed = True

        async def swallow(message: Any) -> None:
            return None

        await self.app(scope, receive, swallow)
        raise RuntimeError("the process died before answering")


def test_flow_crash_before_the_answer_then_redelivery_creates_one_watch(
    db_url: str, db: psycopg.Connection[Any]
) -> None:
    settings = ingress_settings()
    body, headers = espocrm_delivery([DEAL], CREATE_HOOK)
    with served(CrashBeforeAnswer(create_app(settings, db_url))) as base:
        lost = httpx.post(f"{base}/webhooks/espocrm", content=body, headers=headers, timeout=10)
        assert lost.status_code == 500  # uvicorn's answer for a dead app: EspoCRM retries it
        retried = httpx.post(f"{base}/webhooks/espocrm", content=body, headers=headers, timeout=10)
    assert (retried.status_code, retried.json()["duplicate"]) == (200, True)
    counts = registering(db, UNUSED_CRM, settings).run()
    assert counts["registered"] == 1
    assert len(_watches(db)) == 1
    assert db.execute("SELECT duplicate_count FROM events").fetchone() == {"duplicate_count": 1}


def test_flow_ten_identical_deliveries_make_one_event_and_one_watch(
    ingress: httpx.Client, db_url: str, db: psycopg.Connection[Any]
) -> None:
    body, headers = espocrm_delivery([DEAL], CREATE_HOOK)
    for _ in range(10):
        assert ingress.post("/webhooks/espocrm", content=body, headers=headers).status_code == 200
    [event] = db.execute("SELECT id, duplicate_count FROM events").fetchall()
    assert event["duplicate_count"] == 9
    registering(db, UNUSED_CRM, ingress_settings()).run()
    assert len(_watches(db)) == 1


@pytest.fixture
def sandbox() -> Iterator[httpx.Client]:
    """The vendor sandbox over real HTTP, with no demo deals."""
    with served(create_sandbox(SandboxConfig())) as base, httpx.Client(base_url=base) as client:
        yield client


def test_flow_poison_event_is_dead_lettered_then_replayed_exactly_once(
    sandbox: httpx.Client,
    db_url: str,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = ingress_settings(event_backoff_base_s=0)
    with served(create_app(settings, db_url)) as ingress:
        hooks = [
            {"id": hook_id, "event": event, "secret": secret}
            for hook_id, event, secret in (STAGE_HOOK, CREATE_HOOK, DELETE_HOOK)
        ]
        sandbox.post(
            "/_sandbox/webhooks", json={"url": f"{ingress}/webhooks/espocrm", "webhooks": hooks}
        )
        deal = {"id": "deal-poison", "name": "Poison", "stage": "Qualification"}
        sandbox.post("/_sandbox/deals", json={"deals": [deal], "emit_webhooks": False})
        sandbox.post("/_sandbox/deals/deal-poison/stage", json={"stage": "Proposal"})
        fault = {"vendor": "espocrm", "kind": "error", "status": 500, "deal_id": "deal-poison"}
        sandbox.post("/_sandbox/faults", json=fault).raise_for_status()
        delivered = sandbox.post("/_sandbox/webhooks/flush", json={}).json()["deliveries"]
    assert [d["status"] for d in delivered] == [200]
    crm = EspoCrmClient(f"{sandbox.base_url}/espocrm", "sandbox-espocrm-key", sleep=lambda _: None)
    for _ in range(settings.event_max_attempts):
        registering(db, crm, settings).run()
    [event] = db.execute("SELECT * FROM events").fetchall()
    assert (event["status"], event["attempts"], event["dead_step"]) == ("dead", 5, "0:open")
    assert "500" in event["last_error"]
    assert _watches(db) == []

    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    assert followup(["dead-letters", "list"]) == 0
    assert f"event:{event['id']}" in capsys.readouterr().out
    assert followup(["dead-letters", "show", f"event:{event['id']}"]) == 0
    assert "deal-poison" in capsys.readouterr().out
    sandbox.delete("/_sandbox/faults").raise_for_status()  # the cause is fixed
    assert followup(["dead-letters", "replay", f"event:{event['id']}"]) == 0
    assert followup(["dead-letters", "replay", "action:task:1:1"]) == 1  # no such action
    registering(db, crm, settings).run()
    registering(db, crm, settings).run()
    crm.close()
    assert followup(["dead-letters", "replay", f"event:{event['id']}"]) == 1
    [watch] = _watches(db)
    assert (watch["subject_id"], watch["subject_name"], watch["source_event_id"]) == (
        "deal-poison",
        "Poison",
        event["id"],
    )
