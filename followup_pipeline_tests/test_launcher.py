"""`followup dev` (what `make run` starts) refuses half-configured vendors. (The machine it starts,
its UI, daemon, quiet console and stop: test_browser.py, on one live machine.)"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from followup_pipeline import launcher
from followup_pipeline.machine import vendor_mode
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.settings import ConfigError, load_settings

SANDBOX = SandboxConfig()
DAEMON_QUERY = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy } } } }"
LOCATION_QUERY = """
{ workspaceOrError { ... on Workspace { locationEntries {
    name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } }
} } } }
"""


def test_launcher_refuses_partial_vendor_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("FOLLOWUP_"):
            monkeypatch.delenv(name)
    assert vendor_mode(load_settings()) == "sandbox"
    monkeypatch.setenv("FOLLOWUP_CLICKUP_TOKEN", "pk_real")
    with pytest.raises(ConfigError) as caught:
        vendor_mode(load_settings())
    for missing in (
        "FOLLOWUP_ESPOCRM_API_KEY",
        "FOLLOWUP_GRAPH_CLIENT_SECRET",
        "FOLLOWUP_MISTRAL_API_KEY",
    ):
        assert missing in str(caught.value)


def test_the_demo_queues_the_morning_list_of_the_current_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the first evaluate, the demo queues the morning list of today's window (on a
    Saturday, of the Friday before), tagged with its partition as the UI's launchpad does."""
    sent: list[dict[str, Any]] = []

    class Answer:
        def json(self) -> dict[str, Any]:
            return {
                "data": {"launchRun": {"__typename": "LaunchRunSuccess", "run": {"runId": "r1"}}}
            }

    def post(url: str, json: dict[str, Any], timeout: float) -> Answer:
        sent.append({"url": url, **json})
        return Answer()

    monkeypatch.setattr(launcher.httpx, "post", post)
    saturday = load_settings(now="2026-03-07T09:00:00+01:00", timezone="Europe/Berlin")
    line = launcher.launch_first_morning_list("http://ui", saturday)
    assert line == "queued the morning list of 2026-03-06: http://ui/runs/r1"
    [request] = sent
    assert request["url"] == "http://ui/graphql"
    params = request["variables"]["params"]
    assert params["selector"]["jobName"] == "morning_report"
    tags = {tag["key"]: tag["value"] for tag in params["executionMetadata"]["tags"]}
    assert tags == {"followup/trigger": "startup", "dagster/partition": "2026-03-06"}

    def refused(url: str, json: dict[str, Any], timeout: float) -> Answer:
        raise httpx.ConnectError("refused")

    monkeypatch.setattr(launcher.httpx, "post", refused)
    assert launcher.launch_first_morning_list("http://ui", saturday) == (
        "the morning list of 2026-03-06 could not be queued (refused)"
    )


def test_launcher_run_line_says_when_the_clock_was_set() -> None:
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
    assert launcher.run_line(run, "http://ui") == (
        "run evaluate 01234567: success, ok (registered=2) [clock set to 2026-03-02T08:00:00+00:00]"
    )
    run["tags"] = run["tags"][:2]
    assert (
        launcher.run_line(run, "http://ui") == "run evaluate 01234567: success, ok (registered=2)"
    )
