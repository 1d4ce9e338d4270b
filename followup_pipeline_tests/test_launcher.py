"""`followup dev` (what `make run` starts) refuses half-configured vendors, and stamps its console
lines in the team's zone. (The machine it starts, its UI, daemon, quiet console and stop:
test_browser.py, on one live machine; its run lines: test_console.py.)"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from followup_pipeline import first_runs, launcher
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

    monkeypatch.setattr(first_runs.httpx, "post", post)
    saturday = load_settings(now="2026-03-07T09:00:00+01:00", timezone="Europe/Berlin")
    line = first_runs.launch_first_morning_list("http://ui", saturday)
    assert line == "queued the morning list of 2026-03-06: http://ui/runs/r1"
    [request] = sent
    assert request["url"] == "http://ui/graphql"
    params = request["variables"]["params"]
    assert params["selector"]["jobName"] == "morning_report"
    tags = {tag["key"]: tag["value"] for tag in params["executionMetadata"]["tags"]}
    assert tags == {"followup/trigger": "startup", "dagster/partition": "2026-03-06"}

    def refused(url: str, json: dict[str, Any], timeout: float) -> Answer:
        raise httpx.ConnectError("refused")

    monkeypatch.setattr(first_runs.httpx, "post", refused)
    assert first_runs.launch_first_morning_list("http://ui", saturday) == (
        "the morning list of 2026-03-06 could not be queued (refused)"
    )


@pytest.fixture
def host_in_tokyo() -> Iterator[None]:
    """The host's own zone is Asia/Tokyo (the team's in no test), and back after."""
    kept = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    yield
    if kept is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = kept
    time.tzset()


@pytest.mark.usefixtures("host_in_tokyo")
def test_launcher_stamps_console_lines_in_the_teams_zone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stamp is the wall clock when the line is printed (not FOLLOWUP_NOW's), in
    FOLLOWUP_TIMEZONE with its abbreviation; not the host's zone."""
    assert time.strftime("%Z") == "JST"
    monkeypatch.setenv("FOLLOWUP_TIMEZONE", "America/New_York")
    monkeypatch.setenv("FOLLOWUP_NOW", "2026-03-02T08:00:00+00:00")
    team = ZoneInfo("America/New_York")
    before = datetime.now(team)
    launcher.Launcher(load_settings()).say("Followup is up")
    after = datetime.now(team)
    clock, zone, message = capsys.readouterr().out.rstrip("\n").split(" ", 2)
    assert message == "Followup is up"
    assert zone in ("EST", "EDT")
    seconds = range(int(before.timestamp()), int(after.timestamp()) + 1)
    assert f"{clock} {zone}" in {f"{datetime.fromtimestamp(s, team):%H:%M:%S %Z}" for s in seconds}
