"""A run killed while its ClickUp create is still on its way: the next runs never send it again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from .conftest import MONDAY, SANDBOX, Machine

KILLS = 5
#: ClickUp takes this long to answer a create: longer than a new run needs to reach the search.
LATENCY_S = 6.0
IN_FLIGHT_S = LATENCY_S + 3.0

RUN_EVALUATE = """
import json, sys
import dagster as dg
from followup_pipeline.defs import evaluate
from followup_pipeline.integrations.resources import ClickUpResource, EspoCrmResource
from followup_pipeline.resources import ClockResource, PostgresResource, RunLockResource
from followup_pipeline.settings import load_settings

args = json.loads(sys.argv[1])
settings = load_settings(**args["settings"])
postgres = PostgresResource(url=args["db_url"])
resources = {
    "postgres": postgres,
    "clock": ClockResource(start=args["now"], ticking=False),
    "evaluate_lock": RunLockResource(postgres=postgres),
    "espocrm": EspoCrmResource(base_url=args["espocrm_url"], api_key=args["espocrm_key"]),
    "clickup": ClickUpResource(
        base_url=args["clickup_url"], token=args["clickup_token"], list_id=args["list_id"],
        timeout_s=settings.vendor_timeout_s,
    ),
}
built = dg.Definitions.merge(evaluate.build_defs(settings), dg.Definitions(resources=resources))
built.resolve_job_def("evaluate").execute_in_process(instance=dg.DagsterInstance.ephemeral())
"""


def _attempted(db: psycopg.Connection[Any]) -> set[str]:
    rows = db.execute("SELECT idempotency_key FROM actions WHERE outcome = 'attempted'")
    return {row["idempotency_key"] for row in rows}


def _start_run(machine: Machine, script: Path, now: str) -> subprocess.Popen[bytes]:
    args = {
        "settings": {
            "espocrm_url": f"{machine.sandbox}/espocrm",
            "clickup_url": f"{machine.sandbox}/clickup/api",
            **machine.settings,
        },
        "db_url": machine.db_url,
        "now": now,
        "espocrm_url": f"{machine.sandbox}/espocrm",
        "espocrm_key": SANDBOX.espocrm_api_key.get_secret_value(),
        "clickup_url": f"{machine.sandbox}/clickup/api",
        "clickup_token": SANDBOX.clickup_token.get_secret_value(),
        "list_id": SANDBOX.clickup_list_id,
    }
    return subprocess.Popen(
        [sys.executable, str(script), json.dumps(args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_kills_mid_create_never_double_a_task(
    machine: Machine, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    script = tmp_path / "run_evaluate.py"
    script.write_text(RUN_EVALUATE)
    machine.settings.update(action_in_flight_s=IN_FLIGHT_S, vendor_timeout_s=LATENCY_S + 2)
    names = [f"Kill {n}" for n in range(KILLS)]
    for name in names:
        machine.deal(name=name)
    machine.evaluate(MONDAY)
    machine.fault(vendor="clickup", kind="latency", latency_s=LATENCY_S, method="POST")
    due = (MONDAY + timedelta(days=7)).isoformat()
    killed_mid_create = 0
    for _ in range(KILLS):
        before = _attempted(db)
        run = _start_run(machine, script, due)
        deadline = time.monotonic() + 60
        while not _attempted(db) - before and time.monotonic() < deadline:
            assert run.poll() is None, "the run ended before it began a create"
            time.sleep(0.05)
        time.sleep(0.5)  # its POST is on its way, ClickUp is still working on it
        run.kill()
        run.wait()
        killed_mid_create += 1
    with machine.control() as control:
        [fault] = control.get("/faults").json()["faults"]
        control.delete("/faults").raise_for_status()
    assert killed_mid_create == KILLS
    assert fault["hits"] >= KILLS  # every killed run had its create at ClickUp
    time.sleep(IN_FLIGHT_S)  # the last request has landed; now the runs may settle
    machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    created = Counter(task["name"].split(" — ")[0] for task in machine.tasks())
    assert created == Counter({f"Nachfassen: {name}": 1 for name in names})
    outcomes = Counter(action["outcome"] for action in machine.actions())
    assert outcomes == Counter({"confirmed": KILLS})


def test_kills_a_deal_closed_while_its_create_is_in_flight_gets_its_task_closed(
    machine: Machine,
) -> None:
    machine.settings["action_in_flight_s"] = 2.0
    deal = machine.deal(name="Won mid-create")
    machine.evaluate(MONDAY)
    machine.fault(vendor="clickup", kind="drop_answer", method="POST", count=1)
    machine.evaluate(MONDAY + timedelta(days=7))  # ClickUp created it; the answer was lost
    assert [a["outcome"] for a in machine.actions()] == ["unknown"]
    machine.move(deal, "Closed Won")
    machine.evaluate(MONDAY + timedelta(days=7, hours=1))  # closes the watch; the step waits
    assert machine.watch(deal)["closed_reason"] == "won"
    assert machine.steps(deal)[0]["fired_at"] is None
    assert machine.steps(deal)[0]["skipped_at"] is None
    time.sleep(2.0)
    machine.evaluate(MONDAY + timedelta(days=7, hours=2))  # settles the left step, closes its task
    [task] = machine.tasks()
    assert machine.steps(deal)[0]["task_ref"] == task["id"]
    assert task["status"]["type"] == "closed"
    closes = [a for a in machine.actions() if a["kind"] == "close_task"]
    assert [(a["outcome"], a["provider_ref"]) for a in closes] == [("confirmed", task["id"])]
