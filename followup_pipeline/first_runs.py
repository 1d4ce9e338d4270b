"""The first runs a new machine queues itself (``followup dev``, on the sandbox), through the
Dagster UI's GraphQL as an operator's launchpad would: one ``evaluate`` at once, then one
``enrich`` (so the first morning list has its summaries), then the current window's morning
list; and the machine's first week, noted once for its partitions' start
(``settings_core.partitions_start_on``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from followup_pipeline.clock import build_clock
from followup_pipeline.defs.report.window import current_window
from followup_pipeline.machine import LOCATION
from followup_pipeline.settings import Settings
from followup_pipeline.settings_core import FIRST_DAY_FILE

LAUNCH_RUN = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
    ... on PipelineNotFoundError { message }
    ... on UnauthorizedError { message }
  }
}
"""
#: The tag of the run ``followup dev`` starts itself.
TRIGGER_TAG = "followup/trigger"
#: Dagster's tag of a run's partition (what the UI's launchpad sets).
PARTITION_TAG = "dagster/partition"


def launch_run(ui: str, job: str, tags: dict[str, str], **options: Any) -> dict[str, Any] | str:
    """Queue one run of ``job`` through the UI's GraphQL: the ``launchRun`` answer of a queued
    run, or why it could not be queued. ``options`` go to ``httpx.post`` (a UI behind a proxy:
    ``auth``, ``verify``)."""
    params = {
        "selector": {
            "repositoryLocationName": LOCATION,
            "repositoryName": "__repository__",
            "jobName": job,
        },
        "runConfigData": {},
        "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
    }
    try:
        answer = httpx.post(
            f"{ui}/graphql",
            json={"query": LAUNCH_RUN, "variables": {"params": params}},
            timeout=30,
            **options,
        ).json()
        result = answer["data"]["launchRun"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
        return str(error)
    if not isinstance(result, dict):
        return str(answer)
    if result.get("__typename") != "LaunchRunSuccess":
        return str(result.get("message") or result.get("errors") or result.get("__typename"))
    return result


def note_first_day(settings: Settings, *, fresh: bool) -> None:
    """Note the machine's first week, once, when its database is new (``fresh``: this start
    made it): the Monday of the week of its first start (the team's zone, the machine's clock),
    so a first start on a weekend still has the Friday before among its partitions. An existing
    machine, upgraded or restored, notes nothing: its partitions keep their start."""
    path = settings.home / FIRST_DAY_FILE
    if not fresh or path.exists():
        return
    today = build_clock(settings.now).now().astimezone(ZoneInfo(settings.timezone)).date()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{today - timedelta(days=today.weekday())}\n", "utf-8")


def launch_first_evaluate(ui: str) -> tuple[str, str | None]:
    """Queue one ``evaluate`` (no partition: the clock decides) through the UI's GraphQL, so a
    new machine reconciles the CRM at once instead of at the next business hour. A line that
    says what happened, and the run's id if it was queued."""
    result = launch_run(ui, "evaluate", {TRIGGER_TAG: "startup"})
    if isinstance(result, str):
        return f"the first evaluate could not be queued ({result}); it runs at the next hour", None
    run_id = str(result["run"]["runId"])
    return f"queued the first evaluate: {ui}/runs/{run_id}", run_id


def launch_first_enrich(ui: str) -> tuple[str, str | None]:
    """Queue one ``enrich`` once the first evaluate ended, so the first morning list has its
    deals' e-mail summaries (the schedule's first run is at half past). A line that says what
    happened, and the run's id if it was queued."""
    result = launch_run(ui, "enrich", {TRIGGER_TAG: "startup"})
    if isinstance(result, str):
        return f"the first summaries could not be queued ({result}); they come at :30", None
    run_id = str(result["run"]["runId"])
    return f"queued the first summaries: {ui}/runs/{run_id}", run_id


def launch_first_morning_list(ui: str, settings: Settings) -> str:
    """Queue the morning list of the current window (today, or on a weekend the Friday before;
    ``defs/report/window.py``) once the first evaluate ended (its tasks are in), so the demo's
    outbox holds one on any day and at any hour. Once per window, as every send: a second start
    the same day sends nothing. A line that says what happened."""
    window = current_window("morning", build_clock(settings.now).now(), settings.timezone)
    result = launch_run(ui, "morning_report", {TRIGGER_TAG: "startup", PARTITION_TAG: window})
    if isinstance(result, str):
        return f"the morning list of {window} could not be queued ({result})"
    return f"queued the morning list of {window}: {ui}/runs/{result['run']['runId']}"
