"""A harness for ``evaluate``: the real job, real Postgres, the sandbox over HTTP, a set clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import httpx
import psycopg
import pytest

from followup_pipeline.defs import enrich, evaluate
from followup_pipeline.engine.runs import OUTCOME_TAG
from followup_pipeline.integrations.resources import (
    ClickUpResource,
    EspoCrmResource,
    MistralResource,
    OutlookResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource, RunLockResource
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.settings import Settings, load_settings

SANDBOX = SandboxConfig()
#: Monday 2 March 2026, 09:00 in Berlin.
MONDAY = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


@dataclass
class Machine:
    """Runs ``evaluate`` at a chosen instant against one database and the sandbox."""

    db_url: str
    sandbox: str
    db: psycopg.Connection[Any]
    settings: dict[str, Any] = field(default_factory=dict)
    instance: dg.DagsterInstance = field(default_factory=dg.DagsterInstance.ephemeral)

    def loaded_settings(self) -> Settings:
        """The machine's settings: the sandbox's URLs and this test's overrides."""
        values: dict[str, Any] = {
            "espocrm_url": f"{self.sandbox}/espocrm",
            "clickup_url": f"{self.sandbox}/clickup/api",
            # Settle a row left attempted at once: these tests finish their runs; the kill test
            # (test_kills.py) sets the window of a request still on its way.
            "action_in_flight_s": 0,
            "partitions_start": "2026-01-01",  # the simulated days are in 2026
        }
        return load_settings(**{**values, **self.settings})

    def resources(self, now: datetime) -> dict[str, Any]:
        postgres = PostgresResource(url=self.db_url)
        return {
            "postgres": postgres,
            "clock": ClockResource(start=now.isoformat(), ticking=False),
            "evaluate_lock": RunLockResource(postgres=postgres),
            "espocrm": EspoCrmResource(
                base_url=f"{self.sandbox}/espocrm",
                api_key=SANDBOX.espocrm_api_key.get_secret_value(),
            ),
            "clickup": ClickUpResource(
                base_url=f"{self.sandbox}/clickup/api",
                token=SANDBOX.clickup_token.get_secret_value(),
                list_id=SANDBOX.clickup_list_id,
            ),
            "ops_clickup": ClickUpResource(
                base_url=f"{self.sandbox}/clickup/api",
                token=SANDBOX.clickup_token.get_secret_value(),
                list_id=SANDBOX.clickup_ops_list_id,
            ),
            "outlook": OutlookResource(
                login_url=f"{self.sandbox}/login",
                graph_url=f"{self.sandbox}/graph",
                tenant_id=SANDBOX.graph_tenant_id,
                client_id=SANDBOX.graph_client_id,
                client_secret=SANDBOX.graph_client_secret.get_secret_value(),
                sender="followup@example.com",
            ),
            "mistral": MistralResource(
                base_url=f"{self.sandbox}/mistral",
                api_key=SANDBOX.mistral_api_key.get_secret_value(),
                model="mistral-small-latest",
            ),
        }

    def job(
        self,
        capability: Any,
        name: str,
        resources: dict[str, Any],
        settings: Settings | None = None,
    ) -> dg.JobDefinition:
        """The job ``name`` of a capability folder, built from ``settings`` (this machine's by
        default) and bound to ``resources``, as ``definitions.py`` builds it."""
        built = capability.build_defs(settings or self.loaded_settings())
        return dg.Definitions.merge(built, dg.Definitions(resources=resources)).resolve_job_def(
            name
        )

    def evaluate(
        self, now: datetime, *, raise_on_error: bool = True, **kwargs: Any
    ) -> dg.ExecuteInProcessResult:
        """One ``evaluate`` run whose clock says ``now``."""
        job = self.job(evaluate, "evaluate", self.resources(now))
        return job.execute_in_process(
            raise_on_error=raise_on_error, instance=self.instance, **kwargs
        )

    def enrich(self, now: datetime, **kwargs: Any) -> dg.ExecuteInProcessResult:
        """One ``enrich`` run whose clock says ``now``."""
        job = self.job(enrich, "enrich", self.resources(now))
        return job.execute_in_process(instance=self.instance, **kwargs)

    def email(self, deal_id: str, body: str, **fields: Any) -> None:
        """Link an e-mail to a deal in the sandbox's CRM."""
        with self.control() as control:
            email = {"subject": "Re: offer", "fromAddress": "buyer@acme.example", "body": body}
            answer = control.post(f"/deals/{deal_id}/emails", json={**email, **fields})
            answer.raise_for_status()

    def sandbox_clock(self, now: datetime) -> None:
        """Set the sandbox's clock (records it creates are stamped with it)."""
        with self.control() as control:
            control.post("/clock", json={"now": now.isoformat()}).raise_for_status()

    def outbox(self) -> list[dict[str, Any]]:
        """Every message Graph accepted."""
        with self.control() as control:
            return list(control.get("/outbox").json()["messages"])

    def model_requests(self) -> list[dict[str, Any]]:
        """Every chat-completion body the sandbox's Mistral received."""
        with self.control() as control:
            return list(control.get("/mistral/requests").json()["requests"])

    def outcome(self, result: dg.ExecuteInProcessResult) -> str:
        """The run's ``followup/outcome`` tag."""
        run = self.instance.get_run_by_id(result.run_id)
        assert run is not None
        return run.tags[OUTCOME_TAG]

    def control(self) -> httpx.Client:
        return httpx.Client(base_url=f"{self.sandbox}/_sandbox", timeout=10)

    def deal(self, **attributes: Any) -> str:
        """Seed one deal in the sandbox's CRM, without webhooks; returns its id."""
        body = {"deals": [{"stage": "Proposal", **attributes}], "emit_webhooks": False}
        with self.control() as control:
            answer = control.post("/deals", json=body)
            answer.raise_for_status()
            return str(answer.json()["deals"][0]["id"])

    def move(self, deal_id: str, stage: str) -> None:
        with self.control() as control:
            control.post(f"/deals/{deal_id}/stage", json={"stage": stage}).raise_for_status()

    def delete(self, deal_id: str) -> None:
        with self.control() as control:
            control.delete(f"/deals/{deal_id}").raise_for_status()

    def fault(self, **spec: Any) -> None:
        with self.control() as control:
            control.post("/faults", json=spec).raise_for_status()

    def tasks(self, list_id: str = SANDBOX.clickup_list_id) -> list[dict[str, Any]]:
        """The tasks of the follow-up list (of ``list_id``: the operations list has alerts)."""
        with self.control() as control:
            found = control.get("/clickup/tasks").json()["tasks"]
        return [t for t in found if t["list"]["id"] == list_id]

    def comments(self) -> Any:
        with self.control() as control:
            return control.get("/clickup/tasks").json()["comments"]

    def watch(self, deal_id: str) -> dict[str, Any]:
        row = self.db.execute(
            "SELECT * FROM watches WHERE subject_id = %s ORDER BY id DESC LIMIT 1", (deal_id,)
        ).fetchone()
        assert row is not None, f"no watch for {deal_id}"
        return dict(row)

    def steps(self, deal_id: str) -> list[dict[str, Any]]:
        watch = self.watch(deal_id)
        return list(
            self.db.execute(
                "SELECT * FROM watch_steps WHERE watch_id = %s ORDER BY step_no", (watch["id"],)
            ).fetchall()
        )

    def actions(self) -> list[dict[str, Any]]:
        return list(self.db.execute("SELECT * FROM actions ORDER BY id").fetchall())


@pytest.fixture
def machine(db_url: str, sandbox: str, db: psycopg.Connection[Any]) -> Machine:
    """The machine on a fresh database and a reset sandbox with no deals."""
    with httpx.Client(base_url=sandbox, timeout=5) as control:
        control.post("/_sandbox/reset", json={"demo": False}).raise_for_status()
    return Machine(db_url=db_url, sandbox=sandbox, db=db)


MachineFactory = Callable[..., Machine]
