"""A live machine (`followup dev`, what `make run` starts) on the sandbox's demo, and its Dagster
UI driven in a real browser: Debian's Chromium through Playwright (`make browser` installs it;
without it these tests are skipped and say so).

What an operator does in the UI: sees every schedule and sensor running, launches `evaluate`
from the Launchpad, backfills failed business hours from the Partitions tab, re-executes a
failed run from its failure. And what a newcomer sees without touching anything: within two
minutes of the UI answering, `register` runs fed by the sandbox's webhooks, an `evaluate` run,
and watches.

Screenshots go to a temporary folder; with FOLLOWUP_UPDATE_SCREENSHOTS=1, to docs/ (the README
shows them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import psycopg
import pytest

from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.store.embedded import EmbeddedCluster
from followup_pipeline_tests.support import free_port, wait_until

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Chromium on a machine with no way out: no background traffic, no sandbox as root.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCHEDULES = [
    "backup_nightly",
    "crm_changes_nightly",
    "enrich_hourly",
    "evaluate_business_hours",
    "lms_reminders_every_15_min",
    "lms_weekly_monday",
    "morning_report_weekdays",
    "ops_weekly_monday",
    "purge_nightly",
    "weekly_report_friday",
]
SENSORS = ["alert_checks", "alerts", "crm_events", "dead_runs", "lead_events"]
RUNS = """
query($job: String!) {
  runsOrError(filter: {pipelineName: $job}) {
    ... on Runs { results { runId status creationTime tags { key value } } }
  }
}
"""


@dataclass
class Live:
    """A running `followup dev`: its UI, its sandbox, its home, and when the UI answered."""

    ui: str
    sandbox: str
    home: Path
    up_at: float
    shots: Path
    process: subprocess.Popen[bytes]
    console: Path

    def runs(self, job: str) -> list[dict[str, Any]]:
        answer = httpx.post(
            f"{self.ui}/graphql", json={"query": RUNS, "variables": {"job": job}}, timeout=10
        ).json()
        runs: list[dict[str, Any]] = answer["data"]["runsOrError"]["results"]
        for run in runs:
            run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
        return runs

    def watches(self) -> int:
        with psycopg.connect(EmbeddedCluster(self.home).url("followup")) as conn:
            row = conn.execute("SELECT count(*) FROM followup.watches").fetchone()
        return int(row[0]) if row else 0


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("live")
    home, port, sandbox_port = root / "home", free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}
    env.update(
        FOLLOWUP_HOME=str(home),
        FOLLOWUP_SANDBOX_PORT=str(sandbox_port),
        FOLLOWUP_INGRESS_PORT=str(free_port()),
        # Partitions from a fixed day: the failed hours below are real business hours.
        FOLLOWUP_PARTITIONS_START=str(_recent_workday() - timedelta(days=7)),
    )
    console = (root / "console.txt").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "followup_pipeline.cli", "dev", "--port", str(port)],
        env=env,
        stdout=console,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ui = f"http://127.0.0.1:{port}"
    update = os.environ.get("FOLLOWUP_UPDATE_SCREENSHOTS") == "1"
    shots = repo_root / "docs" if update else root / "shots"
    shots.mkdir(exist_ok=True)
    try:
        wait_until(lambda: "Followup is up" in (root / "console.txt").read_text(), 180, "the UI")
        yield Live(
            ui,
            f"http://127.0.0.1:{sandbox_port}",
            home.resolve(),
            time.time(),
            shots,
            process,
            root / "console.txt",
        )
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=90)
        console.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium: run `make browser` (Debian's chromium, installed as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no Playwright: `make browser` (or the dev extras) installs it")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, live: Live, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    # The UI loads its partitions and configs while the other test process works too (make test
    # runs two): a minute for an element to show, not half of one.
    context.set_default_timeout(90_000)
    opened = context.new_page()
    # Dagster's first-visit dialog ("Join the Dagster community") may show at any moment of the
    # first page (later on a busy machine): whenever it covers what a step waits for, Skip.
    opened.add_locator_handler(opened.get_by_role("button", name="Skip"), lambda skip: skip.click())
    try:
        yield opened
    finally:
        # What the page showed last, for a look when a test failed (not into docs/).
        last = live.home.parent / f"last-{request.node.name}.png"
        with contextlib.suppress(Exception):
            opened.screenshot(path=str(last), full_page=True)
        context.close()


def _recent_workday() -> datetime:
    """A weekday before today (Berlin), whose business hours are partitions of the past."""
    day = datetime.now(ZoneInfo("Europe/Berlin")).date() - timedelta(days=1)
    while day.weekday() >= 5 or (day.month, day.day) in ((12, 25), (12, 26), (1, 1)):
        day -= timedelta(days=1)
    return datetime(day.year, day.month, day.day)


def _open(page: Any, url: str) -> None:
    """Open ``url`` and close Dagster's first-visit dialog when it shows."""
    from playwright.sync_api import TimeoutError as NoDialog

    page.goto(url, wait_until="networkidle")
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.wait_for(state="visible", timeout=2_000)
    except NoDialog:
        return
    skip.click()


def _launch_from_launchpad(page: Any, live: Live, partition: str) -> str:
    """Launch `evaluate` for ``partition`` from its Launchpad; the new run's id."""
    _open(page, f"{live.ui}/locations/followup/jobs/evaluate/playground")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = page.get_by_placeholder("Partition")
    item = page.get_by_role("menuitem", name=partition)
    # The partitions load after the page does, and a render that lands meanwhile empties the
    # box: its list is awaited, and the partition typed again when the box lost it.
    # On a busy machine a click can land before the box listens: its list never opens, and the
    # box is clicked again.
    for attempt in range(4):
        box.click()
        try:
            page.get_by_role("menuitem").first.wait_for(timeout=30_000)
            box.fill(partition)
            item.wait_for(timeout=20_000)
            break
        except PlaywrightTimeout:
            if attempt == 3:
                raise
            page.keyboard.press("Escape")
    item.click()  # not Enter: that launches too
    # The partition's config loads and is checked before a launch is taken: a click before
    # that is lost (no run, no navigation).

    page.wait_for_load_state("networkidle")
    page.get_by_text("No errors", exact=True).first.wait_for()
    launch = page.get_by_role("button", name="Launch Run")
    before = {run["runId"] for run in live.runs("evaluate")}
    for _ in range(3):
        launch.wait_for()
        page.wait_for_function(
            "() => [...document.querySelectorAll('button')]"
            ".some(b => b.textContent.includes('Launch Run') && !b.disabled)"
        )
        launch.click()
        try:
            page.wait_for_url("**/runs/*", timeout=20_000)
            return str(page.url.rsplit("/", 1)[1])
        except PlaywrightTimeout:
            # A slow machine: the run may exist without the page having moved to it; a click
            # that launched nothing (the page re-rendered under it) is made again.
            launched = [
                run["runId"]
                for run in live.runs("evaluate")
                if run["runId"] not in before and run["tags"].get("dagster/partition") == partition
            ]
            if launched:
                return str(launched[0])
    raise AssertionError(f"Launch Run on the Launchpad launched no run for {partition}")


def _wait_status(live: Live, run_id: str, statuses: set[str], timeout: float) -> str:
    def status() -> str | None:
        for job in ("evaluate",):
            for run in live.runs(job):
                if run["runId"] == run_id and run["status"] in statuses:
                    return str(run["status"])
        return None

    found: str = wait_until(status, timeout, f"run {run_id} in {statuses}")
    return found


def test_browser_automation_shows_every_schedule_and_sensor_running(page: Any, live: Live) -> None:
    _open(page, f"{live.ui}/automation")
    for name in SCHEDULES + SENSORS:
        page.get_by_text(name, exact=True).wait_for()
    # Each row has a selection box (unchecked) and its on/off switch: seven switches, all on.
    # The UI draws the rows first and their switches' state when its next query answers.
    checked = (
        "() => Array.from(document.querySelectorAll('input[type=checkbox]')).map(i => i.checked)"
    )
    expected = len(SCHEDULES) + len(SENSORS)
    with contextlib.suppress(Exception):
        page.wait_for_function(
            f"() => ({checked})().filter(Boolean).length >= {expected}", timeout=30_000
        )
    switches = page.evaluate(checked)
    assert switches.count(True) == expected, switches
    page.screenshot(path=str(live.shots / "ui-automation.png"))


def test_browser_launches_evaluate_from_the_launchpad(page: Any, live: Live) -> None:
    hour = _recent_workday().replace(hour=9).strftime("%Y-%m-%d-%H:%M")
    run_id = _launch_from_launchpad(page, live, hour)
    assert _wait_status(live, run_id, {"SUCCESS", "FAILURE"}, 120) == "SUCCESS"
    page.reload(wait_until="networkidle")
    page.get_by_placeholder("Filter…").fill("outcome")  # the lines with the run's counts
    page.get_by_text("outcome ok", exact=False).first.wait_for()
    page.screenshot(path=str(live.shots / "ui-run.png"))
    # The run list shows the business counts as tags.
    _open(page, f"{live.ui}/runs")
    page.get_by_text("followup/counts", exact=False).first.wait_for()


def test_browser_backfills_failed_hours_and_reexecutes_from_failure(page: Any, live: Live) -> None:
    control = f"{live.sandbox}/_sandbox/stages"
    stages: list[str] = httpx.get(control).json()["stages"]
    hours = [_recent_workday().replace(hour=h).strftime("%Y-%m-%d-%H:%M") for h in (10, 11)]
    # An admin renames a watched stage in the CRM: evaluate fails loudly (and so does its retry).
    renamed = [("Verhandlung" if s == "Negotiation" else s) for s in stages]
    httpx.put(control, json={"stages": renamed}).raise_for_status()
    try:
        failed = [_launch_from_launchpad(page, live, hour) for hour in hours]
        for run_id in failed:
            assert _wait_status(live, run_id, {"SUCCESS", "FAILURE"}, 120) == "FAILURE"

        def retried_and_failed() -> bool:
            runs = [r for r in live.runs("evaluate") if r["tags"].get("dagster/retry_number")]
            roots = {r["tags"]["dagster/root_run_id"] for r in runs if r["status"] == "FAILURE"}
            return set(failed) <= roots

        wait_until(retried_and_failed, 120, "the automatic retries to fail too")
    finally:
        httpx.put(control, json={"stages": stages}).raise_for_status()  # the admin fixes it

    # The Partitions tab: all partitions, only the failed ones, one backfill. (The tab learns
    # of the failures from Dagster's partition status, updated moments after the runs end.)
    # (A scheduled evaluate that failed on the hour meanwhile may make it three.)
    def failed_hours() -> Any:
        _open(page, f"{live.ui}/locations/followup/jobs/evaluate/partitions")
        page.get_by_role("button", name="Launch backfill…").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_role("button", name="All", exact=True).click()
        for count in (2, 3):
            if dialog.get_by_text(f"Failed ({count})").is_visible():
                return dialog, count
        page.keyboard.press("Escape")
        return None

    dialog, count = wait_until(failed_hours, 90, "the Partitions tab to show the failed hours")
    dialog.get_by_text("Missing (", exact=False).click()  # untick: only the failed hours
    dialog.get_by_role("button", name=f"Submit {count} runs").click()

    def backfilled() -> bool:
        ok = {
            r["tags"].get("dagster/partition")
            for r in live.runs("evaluate")
            if r["tags"].get("dagster/backfill") and r["status"] == "SUCCESS"
        }
        return set(hours) <= ok

    wait_until(backfilled, 240, "the backfill's runs to succeed")

    # The backfill's row says so once the backfill daemon has looked again (every 30 s).
    def backfill_done() -> bool:
        _open(page, f"{live.ui}/locations/followup/jobs/evaluate/partitions")
        history = page.get_by_text("Backfill history").locator("xpath=../..")
        return "Succeeded" in history.inner_text()

    try:
        wait_until(backfill_done, 120, "the backfill's row to say it completed")
    finally:
        page.screenshot(path=str(live.shots / "ui-partitions.png"), full_page=True)

    # A failed run, re-executed from its failure once the cause is fixed.
    _open(page, f"{live.ui}/runs/{failed[0]}")
    page.get_by_role("button", name="Re-execute all (*)").locator("xpath=..").locator(
        "button"
    ).last.click()
    page.get_by_role("menuitem", name="From failure").click()
    page.wait_for_url(lambda url: failed[0] not in url and "/runs/" in url)
    again = str(page.url.rsplit("/", 1)[1])
    assert _wait_status(live, again, {"SUCCESS", "FAILURE"}, 120) == "SUCCESS"
    rerun = next(r for r in live.runs("evaluate") if r["runId"] == again)
    assert rerun["tags"]["dagster/parent_run_id"] == failed[0]


def test_live_demo_shows_work_within_two_minutes(live: Live) -> None:
    # Nothing switched on by hand: the first evaluate at start, register from webhooks.
    deadline = live.up_at + 120

    def within(job: str, fed_by_webhooks: bool = False) -> bool:
        for run in live.runs(job):
            if run["status"] != "SUCCESS" or run["creationTime"] > deadline:
                continue
            counts = run["tags"].get("followup/counts", "")
            if not fed_by_webhooks or "events_claimed=" in counts:
                return True
        return False

    wait_until(lambda: within("register", fed_by_webhooks=True), 150, "a register run")
    started = [r for r in live.runs("evaluate") if r["tags"].get("followup/trigger") == "startup"]
    assert [r["status"] for r in started] == ["SUCCESS"]  # queued once, at start
    assert started[0]["creationTime"] <= deadline
    assert live.watches() > 0
    # The sandbox keeps its world under FOLLOWUP_HOME for the next start (test_demo.py shows a
    # restart finding it).
    assert (live.home / "sandbox" / "state.json").stat().st_size > 0


def _processes_naming(home: Path) -> list[str]:
    """The command lines of running processes that name ``home`` (the machine's children do)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if str(home) in text:
                found.append(text[:200])
    return found


DAEMONS = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy } } } }"


def test_live_machine_runs_on_postgres_and_stops_everything_quietly(live: Live) -> None:
    # (The last test of the module: it stops the machine as Ctrl-C does.)
    answer = httpx.post(f"{live.ui}/graphql", json={"query": DAEMONS}, timeout=10).json()
    statuses = answer["data"]["instance"]["daemonHealth"]["allDaemonStatuses"]
    assert {"SCHEDULER", "SENSOR", "QUEUED_RUN_COORDINATOR"} <= {
        s["daemonType"] for s in statuses if s["healthy"]
    }
    with psycopg.connect(EmbeddedCluster(live.home).url("dagster")) as conn:
        tables = {row[0] for row in conn.execute("SELECT tablename FROM pg_tables")}
    assert {"runs", "event_logs", "jobs"} <= tables
    assert (live.home / "dagster" / "dagster.yaml").exists()

    os.killpg(live.process.pid, signal.SIGINT)
    live.process.wait(timeout=90)
    assert not EmbeddedCluster(live.home).is_running()
    assert _processes_naming(live.home) == []  # no code server or other child left behind
    # A quiet console: the start-up, the URLs once the UI answered, a line per finished run,
    # the stop; the children's output is in their log files. No secret, the sandbox's included.
    lines = live.console.read_text().splitlines()
    other = [line for line in lines if " run " not in line]
    assert len(other) < 15, lines
    up = next(line for line in lines if "Followup is up: Dagster UI at" in line)
    assert live.ui in up
    assert all("Traceback" not in line and "Warning" not in line for line in lines), lines
    sandbox = SandboxConfig()
    for secret in (sandbox.clickup_token, sandbox.espocrm_api_key, sandbox.mistral_api_key):
        assert secret.get_secret_value() not in "\n".join(lines)
    logs = live.home / "logs"
    assert {"sandbox.log", "ingress.log", "dagster.log"} <= {p.name for p in logs.iterdir()}
    assert "Serving dagster-webserver" in (logs / "dagster.log").read_text()
