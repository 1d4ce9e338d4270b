"""The operations list's part of an alert task (``AlertTask``: look-up, create, read-back,
mirror) against the sandbox's ClickUp, without the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.defs.alerts.board import ALERT_TAG, NAME_MAX, AlertTask
from followup_pipeline.engine.effects import ActionSpec, Sent
from followup_pipeline.integrations.clickup import ClickUpClient, key_tag
from followup_pipeline.integrations.errors import TransientError
from followup_pipeline.sandbox.config import SandboxConfig

SANDBOX = SandboxConfig()
SPEC = ActionSpec(
    key="alert:run:abc@20260302T090000:clickup",
    kind="alert",
    due_at=datetime(2026, 3, 2, 9, tzinfo=UTC),
    time_zone="Europe/Berlin",
)


@pytest.fixture
def board(sandbox: str) -> Iterator[ClickUpClient]:
    client = ClickUpClient(
        f"{sandbox}/clickup/api",
        SANDBOX.clickup_token.get_secret_value(),
        SANDBOX.clickup_ops_list_id,
        sleep=lambda _: None,
    )
    yield client
    client.close()


def _tasks(sandbox: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=f"{sandbox}/_sandbox", timeout=10) as control:
        found = control.get("/clickup/tasks").json()["tasks"]
    return [t for t in found if t["list"]["id"] == SANDBOX.clickup_ops_list_id]


def test_alert_task_creates_after_touch_and_finds_it_by_its_key(
    board: ClickUpClient, sandbox: str
) -> None:
    alert = AlertTask(board, name="[followup] " + "x" * 300, markdown="It failed.")
    assert alert.look_up(SPEC) is None
    tasks_at_touch: list[int] = []
    task_id = alert.perform(SPEC, lambda: tasks_at_touch.append(len(_tasks(sandbox))))
    assert tasks_at_touch == [0]  # touched once, before the create
    [task] = _tasks(sandbox)
    assert task["id"] == task_id
    assert len(task["name"]) == NAME_MAX
    assert {t["name"] for t in task["tags"]} == {ALERT_TAG, key_tag(SPEC.key)}
    assert alert.look_up(SPEC) == task_id
    assert alert.read_back(SPEC, task_id) is None  # nothing read: the task stays accepted
    other = ActionSpec(key="alert:other:clickup", kind="alert", due_at=SPEC.due_at,
                       time_zone=SPEC.time_zone)  # fmt: skip
    assert alert.look_up(other) is None  # a task, but not this key's


def test_alert_task_a_create_that_took_and_answered_500_may_have_gone_and_is_found(
    board: ClickUpClient, sandbox: str
) -> None:
    fault = {"vendor": "clickup", "kind": "apply_then_error", "method": "POST", "count": 1}
    with httpx.Client(base_url=f"{sandbox}/_sandbox", timeout=10) as control:
        control.post("/faults", json=fault).raise_for_status()
    alert = AlertTask(board, name="[followup] it failed", markdown="It failed.")
    with pytest.raises(TransientError) as failed:
        alert.perform(SPEC, lambda: None)
    assert failed.value.ambiguous
    [task] = _tasks(sandbox)
    assert alert.look_up(SPEC) == task["id"]


def test_alert_task_mirrors_nothing(board: ClickUpClient, db: psycopg.Connection[Any]) -> None:
    AlertTask(board, name="n", markdown="m").mirror(db, SPEC, Sent("sent", "task-1"))
    assert db.execute("SELECT count(*) AS n FROM actions").fetchone() == {"n": 0}
