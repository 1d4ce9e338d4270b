"""The console of ``followup dev``: a line per finished run, a failed run's with the first line of
why it failed, read from the UI's GraphQL; Dagster's real UI (its webserver app over a test
instance, served on a loopback port) for the reasons, a fake UI at the HTTP boundary for the
answers a real one gives only when something is wrong. (The stamp in the team's zone:
test_launcher.py.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import httpx
import pytest
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import EmptyWorkspaceTarget
from dagster_webserver.app import create_app_from_workspace_process_context

from followup_pipeline.console import REASON_LIMIT, FinishedRuns, run_line
from followup_pipeline.domain.localtime import time_of_day_for_people
from followup_pipeline_tests.support import served

STAGES = "configured stage(s) 'Negotiation' do not exist in the CRM; check FOLLOWUP_WATCHED_STAGES"
LONG = "espocrm: HTTP 503 on GET Opportunity/6650a1b2c3d4e5f01 " + "while the CRM was busy " * 10


@dg.op
def deliberate() -> None:
    raise dg.Failure(description=f"{STAGES}\nthe stages the CRM has: Proposal, Closed Won")


@dg.op
def crashing() -> None:
    raise ValueError(f"{LONG}\nsecond line")


@dg.op
def fine() -> None:
    pass


@dg.job
def failing_stage() -> None:
    deliberate()


@dg.job
def failing_crm() -> None:
    crashing()


@dg.job
def timed_out() -> None:
    fine()


@dg.job
def stopped() -> None:
    fine()


@dg.job
def succeeding() -> None:
    fine()


@pytest.fixture
def ui() -> Iterator[tuple[str, dict[str, str]]]:
    """Dagster's own UI over a test instance holding one finished run of each job above: its
    URL and the run id of each job."""
    with dg.instance_for_test() as instance:
        ids = {}
        for job in (failing_stage, failing_crm):
            ids[job.name] = job.execute_in_process(instance=instance, raise_on_error=False).run_id
        tags = {"followup/outcome": "ok", "followup/counts": "registered=2"}
        ids["succeeding"] = succeeding.execute_in_process(instance=instance, tags=tags).run_id
        # No step failed: a run the monitoring stopped (`dagster/max_runtime`), one canceled.
        late = instance.create_run_for_job(timed_out)
        instance.report_run_failed(late, "Exceeded maximum runtime of 900 seconds.")
        canceled = instance.create_run_for_job(stopped)
        instance.report_run_canceled(canceled, "canceled from the UI")
        ids |= {"timed_out": late.run_id, "stopped": canceled.run_id}
        with (
            WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as context,
            served(create_app_from_workspace_process_context(context)) as url,
        ):
            yield url, ids


def test_console_a_failed_runs_line_says_why_in_its_first_line(
    ui: tuple[str, dict[str, str]],
) -> None:
    url, ids = ui
    with FinishedRuns(url) as runs:
        lines = {line.split()[1]: line for line in runs.new()}
        assert list(runs.new()) == []  # each run once
    link = {job: f"{url}/runs/{run_id}" for job, run_id in ids.items()}
    short = {job: run_id[:8] for job, run_id in ids.items()}
    # A dg.Failure: its description, first line only.
    assert lines["failing_stage"] == (
        f"run failing_stage {short['failing_stage']}: failure: {STAGES} — {link['failing_stage']}"
    )
    # An error under Dagster's wrapper: its type and message, cut at a word when long.
    cut = lines["failing_crm"].split(": failure: ")[1].split(" — ")[0]
    assert cut.endswith("…")
    assert REASON_LIMIT - 25 <= len(cut) <= REASON_LIMIT
    assert f"ValueError: {LONG}".startswith(f"{cut[:-1]} ")  # after a whole word
    assert lines["failing_crm"].endswith(f" — {link['failing_crm']}")
    # No step failed: the run's own failure message.
    assert lines["timed_out"] == (
        f"run timed_out {short['timed_out']}: failure: Exceeded maximum runtime of 900 seconds. "
        f"— {link['timed_out']}"
    )
    assert lines["stopped"] == f"run stopped {short['stopped']}: canceled: {link['stopped']}"
    assert lines["succeeding"] == (
        f"run succeeding {short['succeeding']}: success, ok (registered=2)"
    )


def _fake_ui(answer_events: Callable[[dict[str, Any]], httpx.Response]) -> httpx.MockTransport:
    """A UI that lists one failed and one canceled run, and answers the questions about a run's
    events with ``answer_events``."""
    runs = [
        {"runId": run_id, "jobName": "evaluate", "status": status, "updateTime": 1.0, "tags": []}
        for run_id, status in (("f" * 36, "FAILURE"), ("c" * 36, "CANCELED"))
    ]

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if "runsOrError" in body["query"]:
            return httpx.Response(200, json={"data": {"runsOrError": {"results": runs}}})
        assert body["variables"]["runId"] == "f" * 36  # a canceled run's events are not read
        return answer_events(body["variables"])

    return httpx.MockTransport(handle)


def _lines(answer_events: Callable[[dict[str, Any]], httpx.Response]) -> list[str]:
    with FinishedRuns("http://ui", transport=_fake_ui(answer_events)) as runs:
        return list(runs.new())


AS_TODAY = [
    f"run evaluate ffffffff: failure: http://ui/runs/{'f' * 36}",
    f"run evaluate cccccccc: canceled: http://ui/runs/{'c' * 36}",
]


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(500, text="Internal Server Error"),
        httpx.Response(200, text="<html>busy</html>"),
        httpx.Response(200, json={"data": {"logsForRun": {"__typename": "RunNotFoundError"}}}),
        httpx.Response(200, json={"errors": [{"message": "Cannot query field 'logsForRun'"}]}),
        httpx.Response(200, json={"data": {"logsForRun": {"__typename": "EventConnection"}}}),
    ],
    ids=["500", "not-json", "run-not-found", "graphql-error", "other-shape"],
)
def test_console_a_reason_that_cannot_be_read_leaves_the_line_as_it_was(
    answer: httpx.Response,
) -> None:
    assert _lines(lambda variables: answer) == AS_TODAY


def test_console_reads_a_long_runs_events_page_by_page() -> None:
    """The failure is on the second page of events: the first page's cursor fetches it."""
    asked: list[str | None] = []

    def answer(variables: dict[str, Any]) -> httpx.Response:
        asked.append(variables["after"])
        first = variables["after"] is None
        events = (
            [{"__typename": "LogMessageEvent"}]
            if first
            else [
                {
                    "__typename": "ExecutionStepFailureEvent",
                    "error": {
                        "className": "DagsterExecutionStepExecutionError",
                        "message": "dagster._core.errors.DagsterExecutionStepExecutionError: …\n",
                        "cause": {"className": "KeyError", "message": "KeyError: 'stage'\n"},
                    },
                },
                {"__typename": "RunFailureEvent", "message": "Execution failed.", "error": None},
            ]
        )
        page = {"__typename": "EventConnection", "cursor": "c1", "hasMore": first}
        return httpx.Response(200, json={"data": {"logsForRun": {**page, "events": events}}})

    failed, _ = _lines(answer)
    assert (
        failed == f"run evaluate ffffffff: failure: KeyError: 'stage' — http://ui/runs/{'f' * 36}"
    )
    assert asked == [None, "c1"]


def test_console_run_line_says_when_the_clock_was_set() -> None:
    run = {
        "jobName": "evaluate",
        "runId": "0123456789abcdef",
        "status": "SUCCESS",
        "tags": [
            {"key": "followup/outcome", "value": "ok"},
            {"key": "followup/counts", "value": "registered=2"},
            {"key": "followup/clock", "value": "set to 2026-03-02T08:00:00+00:00"},
        ],
    }
    assert run_line(run, "http://ui") == (
        "run evaluate 01234567: success, ok (registered=2) [clock set to 2026-03-02T08:00:00+00:00]"
    )
    run["tags"] = run["tags"][:2]
    assert run_line(run, "http://ui") == "run evaluate 01234567: success, ok (registered=2)"


def test_console_time_of_day_is_the_teams_with_its_zone() -> None:
    winter, summer = (
        datetime(2026, 3, 2, 8, 0, 5, tzinfo=UTC),
        datetime(2026, 7, 1, 8, 0, 5, tzinfo=UTC),
    )
    assert time_of_day_for_people(winter, "Europe/Berlin") == "09:00:05 CET"
    assert time_of_day_for_people(summer, "Europe/Berlin") == "10:00:05 CEST"
    assert time_of_day_for_people(winter, "America/New_York") == "03:00:05 EST"
