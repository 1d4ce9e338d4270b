"""The hourly cost of ``evaluate`` per watch, in CRM round trips measured in the same run.

The per-watch figures time the evaluation's own work (reconcile, reset, due steps, exhausted)
outside Dagster, so the run's fixed cost (process, resources, event log) does not drown them; that
fixed cost is measured on its own, as a whole ``evaluate`` run with no deal.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import dagster as dg
import httpx

from benchmarks.harness import (
    SANDBOX,
    database,
    evaluate_resources,
    sandbox,
    sandbox_settings,
    timed,
)
from followup_pipeline.defs import evaluate
from followup_pipeline.defs.evaluate.activity import CadenceResetter
from followup_pipeline.defs.evaluate.due import DueSteps
from followup_pipeline.defs.evaluate.reconcile import Reconciler
from followup_pipeline.defs.evaluate.tasks import TaskLedger
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.settings import Settings
from followup_pipeline.store.holidays import load_calendar

DEALS = 100
REPEAT = 5
REGISTERED = "2026-03-02T08:00:00+00:00"
QUIET = "2026-03-03T08:00:00+00:00"
DUE = "2026-03-09T08:00:00+00:00"


def _work(resources: dict[str, Any], settings: Settings, now: str) -> None:
    """What one evaluate run does, without Dagster: reconcile, reset, due steps, exhausted."""
    at = datetime.fromisoformat(now)
    log = logging.getLogger("benchmark")
    db = resources["postgres"]
    crm = resources["espocrm"].get_client()
    with db.connection() as conn:
        calendar = load_calendar(conn, settings.holiday_country, settings.holiday_subdivision)
    run = RunScope(at, None, log)
    tasks = TaskLedger(run, db, resources["clickup"].get_client(), settings)
    tally = Reconciler(run, db, crm, tasks, settings, calendar=calendar).run()
    resets = CadenceResetter(run, db, crm, calendar).run_changes(None)
    due = DueSteps(run, db, crm, tasks, settings, calendar=calendar)
    tally.add(resets.tally).add(due.run(unreadable=resets.unreadable))
    due.close_exhausted()
    tally.add(tasks.tally)
    assert not tally.problems, tally.problems


def run() -> list[dict[str, Any]]:
    """Rows of the benchmark table."""
    logging.getLogger("followup_pipeline.clock").setLevel(logging.ERROR)
    with database() as db_url, sandbox() as base:
        settings = sandbox_settings(base)
        with httpx.Client(base_url=f"{base}/_sandbox", timeout=10) as control:
            control.post("/reset", json={"demo": False}).raise_for_status()
            empty = evaluate_resources(db_url, base, QUIET)
            bound = dg.Definitions(resources=empty)
            evaluate_job = dg.Definitions.merge(evaluate.build_defs(settings), bound)
            job = evaluate_job.resolve_job_def("evaluate")
            instance = dg.DagsterInstance.ephemeral()
            fixed = timed(
                lambda: job.execute_in_process(instance=instance),
                REPEAT,
            )
            deals = [{"name": f"Deal {n}", "stage": "Proposal"} for n in range(DEALS)]
            answer = control.post("/deals", json={"deals": deals, "emit_webhooks": False})
            deal_id = answer.json()["deals"][0]["id"]
        crm = EspoCrmClient(f"{base}/espocrm", SANDBOX.espocrm_api_key.get_secret_value())
        baseline = timed(lambda: crm.get_deal(deal_id=deal_id), REPEAT * 20)
        crm.close()
        resources = evaluate_resources(db_url, base, REGISTERED)
        registering = timed(lambda: _work(resources, settings, REGISTERED), 1)
        quiet = timed(lambda: _work(resources, settings, QUIET), REPEAT)
        firing = timed(lambda: _work(resources, settings, DUE), 1)
        resources["postgres"].teardown_after_execution(None)
    rows = [
        ("CRM round trip (baseline): GET /Opportunity/{id} on the sandbox", baseline),
        ("a whole evaluate run with no deal: Dagster's fixed cost", fixed),
        (f"per watch, registering ({DEALS} new deals)", registering / DEALS),
        (f"per watch, hourly run with nothing due ({DEALS} watches)", quiet / DEALS),
        (f"per watch, every watch fires a task ({DEALS} watches)", firing / DEALS),
    ]
    return [{"benchmark": name, "seconds": s, "ratio": s / baseline} for name, s in rows]
