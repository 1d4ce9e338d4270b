"""Under a real dagster-daemon on Postgres, with nothing switched on by hand: a signed webhook
becomes a watch, a schedule tick launches a run, and ``followup doctor`` reports all green, then
exactly the fault that was made (a schedule switched off, a wrong token, a misspelt stage)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from followup_pipeline.cli import main
from followup_pipeline.ingress.signatures import standard_signature, stripe_signature
from followup_pipeline.machine import install_dagster_home
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.environment import env_lines
from followup_pipeline.sandbox.webhooks import php_json, signatures
from followup_pipeline.settings import load_settings
from followup_pipeline_tests.support import free_port

from ...conftest import with_database

pytestmark = pytest.mark.slow

HOOK = {"id": "6650a1b2c3d4e5f00", "event": "Opportunity.create", "secret": "daemon-secret"}
TIMEOUT_S = 120
TICKING = """load_from:
  - python_module:
      module_name: followup_pipeline_tests.defs.ticking
      location_name: followup
      working_directory: {root}
"""


def _poll(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"gave up waiting for {what} after {timeout} s")


@dataclass
class Machine:
    """The ingress and dagster-daemon as processes on Postgres, vendors in the sandbox."""

    ingress: str
    sandbox: str
    db_url: str
    dagster_db: str
    env: dict[str, str]
    #: The daemon's process (and group): the watchdog's test stops it.
    daemon_pid: int = 0

    def post_webhook(self, deal_id: str, name: str) -> None:
        body = php_json([{"id": deal_id, "name": name, "stage": "Proposal"}])
        signature, _ = signatures(HOOK["id"], body, HOOK["secret"])
        answer = httpx.post(
            f"{self.ingress}/webhooks/espocrm", content=body, headers={"Signature": signature}
        )
        assert answer.status_code == 200, answer.text

    def dagster_rows(self, query: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dagster_db) as conn:
            return conn.execute(query).fetchall()


@pytest.fixture(scope="module")
def machine(
    tmp_path_factory: pytest.TempPathFactory,
    database_factory: Callable[..., str],
    template_name: str,
    sandbox_server: str,
    repo_root: Path,
) -> Iterator[Machine]:
    """One machine for the module: starting the daemon costs seconds, a tick up to a minute."""
    root = tmp_path_factory.mktemp("daemon")
    storage = database_factory()
    dagster_url = with_database(
        storage, str(conninfo_to_dict(storage)["dbname"]), driver="postgresql+psycopg2"
    )
    db_url = database_factory(template_name)
    # The test cron ticks every minute, but the schedule still skips days off: today and
    # tomorrow (a run near midnight) are made workdays, as an operator's override would.
    today = datetime.now(ZoneInfo("Europe/Berlin")).date()
    with psycopg.connect(db_url, autocommit=True) as conn:
        for day in (today, today + timedelta(days=1)):
            conn.execute(
                "INSERT INTO followup.holidays (day, kind, name) VALUES (%s, 'workday', 'test')",
                (day,),
            )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}
    for line in env_lines(SandboxConfig(), sandbox_server):
        name, _, value = line.partition("=")
        env[name] = shlex.split(value)[0]
    env.update(
        FOLLOWUP_HOME=str(root / "home"),
        FOLLOWUP_DATABASE_URL=db_url,
        FOLLOWUP_DAGSTER_PG_URL=dagster_url,
        FOLLOWUP_ESPOCRM_WEBHOOKS=json.dumps([HOOK]),
        FOLLOWUP_EVENTS_SENSOR_INTERVAL_S="2",
        FOLLOWUP_ALERTS_SENSOR_INTERVAL_S="2",
        FOLLOWUP_OPS_OWNER="owner@example.com",
        FOLLOWUP_OPS_BACKUP="backup@example.com",
        FOLLOWUP_INGRESS_PORT=str(port),
    )
    # The machine's DAGSTER_HOME (as `followup dev` makes it); the daemon loads the ticking
    # location under the machine's location name.
    home = install_dagster_home(load_settings(home=root / "home"))
    env["DAGSTER_HOME"] = str(home)
    (root / "ticking.yaml").write_text(TICKING.format(root=json.dumps(str(repo_root))))
    bin_dir = Path(sys.executable).parent
    logs = [(root / "ingress.log").open("wb"), (root / "daemon.log").open("wb")]
    processes = [
        subprocess.Popen(
            [str(bin_dir / "followup"), "ingress"],
            env=env,
            stdout=logs[0],
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ),
        subprocess.Popen(
            [str(bin_dir / "dagster-daemon"), "run", "-w", str(root / "ticking.yaml")],
            env=env,
            cwd=root,
            stdout=logs[1],
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ),
    ]
    running = Machine(
        ingress=f"http://127.0.0.1:{port}",
        sandbox=sandbox_server,
        db_url=db_url,
        dagster_db=with_database(storage, str(conninfo_to_dict(storage)["dbname"])),
        env=env,
        daemon_pid=processes[1].pid,
    )
    try:
        _poll(
            lambda: httpx.get(f"{running.ingress}/healthz", timeout=2).status_code == 200,
            30,
            "the ingress",
        )
        yield running
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for log in logs:
            log.close()


def test_daemon_turns_a_signed_webhook_into_a_watch(machine: Machine) -> None:
    machine.post_webhook("deal-daemon", "Daemon deal")
    with psycopg.connect(machine.db_url, autocommit=True, row_factory=dict_row) as db:
        watch = _poll(
            lambda: db.execute(
                "SELECT * FROM followup.watches WHERE subject_id = 'deal-daemon'"
            ).fetchone(),
            TIMEOUT_S,
            "the watch",
        )
        assert watch["registered_by"] == "webhook"
        events = db.execute("SELECT status FROM followup.events").fetchall()
        assert {row["status"] for row in events} == {"done"}

    def succeeded() -> bool:
        rows = machine.dagster_rows("SELECT status FROM runs WHERE pipeline_name = 'register'")
        return "SUCCESS" in {row[0] for row in rows}

    _poll(succeeded, 30, "a successful register run")


def test_daemon_turns_a_site_form_and_a_payment_into_one_lead(machine: Machine) -> None:
    """The lead intake's whole path: signed deliveries through the ingress, the ``lead_events``
    sensor of the real daemon, ``lead_intake``'s run, one lead for the person."""
    form_secret = json.loads(machine.env["FOLLOWUP_STANDARD_WEBHOOKS"])["site-form"][0]
    pay_secret = json.loads(machine.env["FOLLOWUP_STRIPE_WEBHOOKS"])["payment"][0]
    now = int(time.time())
    form = json.dumps({"type": "form.submitted", "timestamp": "2026-03-02T09:00:00Z",
                       "data": {"name": "Daemon Lead", "email": "Lead@Daemon.example",
                                "consent": True}}).encode()  # fmt: skip
    answer = httpx.post(
        f"{machine.ingress}/webhooks/site-form",
        content=form,
        headers={
            "webhook-id": "msg_daemon_1",
            "webhook-timestamp": str(now),
            "webhook-signature": standard_signature(form_secret, "msg_daemon_1", now, form),
        },
    )
    assert answer.status_code == 200, answer.text
    payment = json.dumps({"id": "evt_daemon_1", "object": "event",
                          "type": "checkout.session.completed",
                          "data": {"object": {"object": "checkout.session", "amount_total": 9900,
                                              "currency": "eur",
                                              "customer_details": {"email": "lead@daemon.example",
                                                                   "name": "Daemon Lead"}}}}
                         ).encode()  # fmt: skip
    answer = httpx.post(
        f"{machine.ingress}/webhooks/payment",
        content=payment,
        headers={"Stripe-Signature": f"t={now},v1={stripe_signature(pay_secret, now, payment)}"},
    )
    assert answer.status_code == 200, answer.text
    with psycopg.connect(machine.db_url, autocommit=True, row_factory=dict_row) as db:

        def linked() -> bool:
            row = db.execute(
                "SELECT count(*) AS n FROM followup.lead_events e JOIN followup.leads l"
                " ON l.id = e.lead_id WHERE l.email = 'lead@daemon.example'"
            ).fetchone()
            return bool(row and row["n"] == 2)

        _poll(linked, TIMEOUT_S, "one lead with two source events")
        assert db.execute(
            "SELECT count(*) AS n FROM followup.leads WHERE email = 'lead@daemon.example'"
        ).fetchone() == {"n": 1}

    def succeeded() -> bool:
        rows = machine.dagster_rows("SELECT status FROM runs WHERE pipeline_name = 'lead_intake'")
        return "SUCCESS" in {row[0] for row in rows}

    _poll(succeeded, 30, "a successful lead_intake run")


def test_daemon_schedule_ticks_unattended(machine: Machine) -> None:
    # Nobody switched the schedule on: its default status is RUNNING, and the daemon ticks it.
    def launched() -> list[tuple[Any, ...]]:
        return machine.dagster_rows(
            "SELECT r.status FROM runs r JOIN run_tags t ON t.run_id = r.run_id"
            " WHERE t.key = 'dagster/schedule_name' AND t.value = 'evaluate_business_hours'"
        )

    rows = _poll(launched, 150, "a run launched by the evaluate schedule's tick")
    assert rows[0][0] in {"QUEUED", "NOT_STARTED", "STARTING", "STARTED", "SUCCESS"}

    # The nightly purge and backup tick the same way (here every minute), and succeed: a backup
    # file in the machine's backups folder, the purge in the audit as the machine's own.
    def housekeeping() -> set[str]:
        found = machine.dagster_rows(
            "SELECT pipeline_name FROM runs WHERE status = 'SUCCESS'"
            " AND pipeline_name IN ('housekeeping_purge', 'housekeeping_backup')"
        )
        return {row[0] for row in found}

    _poll(lambda: len(housekeeping()) == 2, 150, "the nightly purge and backup to succeed")
    backups = Path(machine.env["FOLLOWUP_HOME"]) / "backups"
    assert sorted(backups.glob("followup-*.tar"))
    with psycopg.connect(machine.db_url) as conn:
        purged = conn.execute(
            "SELECT actor FROM followup.audit_log WHERE action = 'purge' LIMIT 1"
        ).fetchone()
    assert purged == ("followup (schedule)",)


def _doctor(
    machine: Machine,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    **changed: str,
) -> tuple[int, set[str], str]:
    with monkeypatch.context() as patch:
        for name, value in {**machine.env, **changed}.items():
            if name.startswith("FOLLOWUP_"):
                patch.setenv(name, value)
        status = main(["doctor"])
    out = capsys.readouterr().out
    faults = {
        line.split(":")[0].split(maxsplit=1)[1]
        for line in out.splitlines()
        if line.startswith(("FAIL ", "WARN "))
    }
    return status, faults, out


def test_daemon_doctor_all_green_then_exactly_each_fault(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine.post_webhook("deal-doctor", "Doctor deal")
    status, faults, out = _doctor(machine, monkeypatch, capsys)
    assert (status, faults) == (0, set()), out
    for line in (
        "ok   schedule evaluate_business_hours: running",
        "ok   sensor alerts: running",
        "ok   daemon: SCHEDULER, SENSOR, QUEUED_RUN_COORDINATOR, BACKFILL beating",
        f"ok   ingress: {machine.ingress}/healthz healthy",
        "ok   webhooks: the last one arrived",
        "ok   mistral: key accepted",
    ):
        assert line in out, out

    wrong = {"FOLLOWUP_CLICKUP_TOKEN": "pk_wrong_token"}
    status, faults, out = _doctor(machine, monkeypatch, capsys, **wrong)
    assert (status, faults) == (1, {"clickup", "clickup users", "alerts"}), out  # ClickUp's too
    assert "pk_wrong_token" not in out
    misspelt = {"FOLLOWUP_WATCHED_STAGES": "Proposal,Negociation"}
    status, faults, out = _doctor(machine, monkeypatch, capsys, **misspelt)
    assert (status, faults) == (1, {"espocrm"}), out
    assert "'Negociation': no such stage in the CRM" in out

    # Switched off as an operator would, from the CLI (the UI's toggle stores the same state).
    stop = subprocess.run(
        [str(Path(sys.executable).with_name("followup")), "dagster", "schedule", "stop",
         "enrich_hourly"],
        env={**machine.env, "DAGSTER_HOME": ""},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert stop.returncode == 0, stop.stdout + stop.stderr
    status, faults, out = _doctor(machine, monkeypatch, capsys)
    assert (status, faults) == (1, {"schedule enrich_hourly"}), out
    assert "FAIL schedule enrich_hourly: stopped" in out


def test_daemon_a_failed_run_reaches_the_owner_once(machine: Machine, tmp_path: Path) -> None:
    # A run-status sensor starts from its first tick: make the failure after it.
    _poll(
        lambda: machine.dagster_rows(
            'SELECT 1 FROM job_ticks WHERE tick_body LIKE \'%"job_name": "alerts"%\' LIMIT 1'
        ),
        90,
        "the alerts sensor's first tick",
    )
    config = tmp_path / "replay.yaml"
    config.write_text('ops: {replay_dead_letters: {config: {names: ["no-such-letter"]}}}\n')
    failed = subprocess.run(
        [str(Path(sys.executable).with_name("followup")), "dagster", "job", "execute",
         "-j", "replay", "-c", str(config)],
        env={**machine.env, "DAGSTER_HOME": ""},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert failed.returncode != 0, failed.stdout + failed.stderr

    def alert_mails() -> list[dict[str, Any]]:
        box = httpx.get(f"{machine.sandbox}/_sandbox/outbox", timeout=5).json()["messages"]
        return [m for m in box if m["message"]["subject"].startswith("[followup] replay:")]

    (mail,) = _poll(alert_mails, TIMEOUT_S, "the alert mail")
    message = mail["message"]
    assert "not a dead-letter name" in message["subject"]
    assert {r["emailAddress"]["address"] for r in message["toRecipients"]} == {
        "owner@example.com",
        "backup@example.com",
    }
    # The alert run ends, and later ticks send nothing more.
    _poll(
        lambda: (
            ("SUCCESS",)
            in machine.dagster_rows("SELECT status FROM runs WHERE pipeline_name = 'alert'")
        ),
        60,
        "the alert run's success",
    )
    time.sleep(6)
    assert len(alert_mails()) == 1


def test_daemon_a_skipped_morning_report_tick_is_alerted_as_missed(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watchdog's look, a day ahead: morning_report_weekdays, running since the machine
    started, has no tick at 07:30 of the next weekday; the alert names it, sent by the watchdog
    itself (a daemon a day older is no stall here: its tolerance is set to a week)."""
    from followup_pipeline.commands.watchdog import once

    _poll(
        lambda: machine.dagster_rows(
            "SELECT 1 FROM instigators WHERE selector_id IS NOT NULL"
            " AND instigator_body LIKE '%morning_report_weekdays%' LIMIT 1"
        ),
        60,
        "the morning list schedule's state",
    )
    _poll(
        lambda: len(machine.dagster_rows("SELECT daemon_type FROM daemon_heartbeats")) >= 4,
        60,
        "every daemon's first heartbeat",
    )
    zone = ZoneInfo("Europe/Berlin")
    day = datetime.now(zone).date() + timedelta(days=1)
    while day.weekday() >= 5:
        day += timedelta(days=1)
    ahead = datetime.combine(day, datetime.min.time(), zone).replace(hour=7, minute=40)
    with monkeypatch.context() as patch:
        for name, value in machine.env.items():
            if name.startswith(("FOLLOWUP_", "DAGSTER_")):
                patch.setenv(name, value)
        settings = load_settings(watchdog_heartbeat_late_s=604_800, watchdog_tick_late_s=300)
        found, failed = once(settings, ahead.astimezone(UTC))
    assert failed == []
    ids = {cause.id for cause in found}
    assert "schedule:morning_report_weekdays" in ids, [c.message for c in found]

    def missed() -> list[dict[str, Any]]:
        box = httpx.get(f"{machine.sandbox}/_sandbox/outbox", timeout=5).json()["messages"]
        subject = "[followup] schedule morning_report_weekdays: morning_report_weekdays missed"
        return [m for m in box if m["message"]["subject"].startswith(subject)]

    (mail,) = _poll(missed, 30, "the missed tick's mail")
    assert f"its tick of {day:%Y-%m-%d} 07:30" in mail["message"]["subject"]


def test_daemon_a_dead_daemon_is_alerted_by_the_watchdog_once(
    machine: Machine, tmp_path: Path
) -> None:
    """(Last in the module: it stops the daemon.) The watchdog, a process of its own, finds no
    heartbeat and mails the owner itself (no alert run could start), once."""
    _poll(
        lambda: machine.dagster_rows("SELECT 1 FROM daemon_heartbeats LIMIT 1"),
        60,
        "the daemon's first heartbeat",
    )
    os.killpg(machine.daemon_pid, signal.SIGKILL)
    env = {
        **machine.env,
        "FOLLOWUP_WATCHDOG_HEARTBEAT_LATE_S": "3",
        "FOLLOWUP_WATCHDOG_TICK_LATE_S": "45",
    }
    log = (tmp_path / "watchdog.log").open("wb")
    watchdog = subprocess.Popen(
        [str(Path(sys.executable).with_name("followup")), "watchdog", "--every", "2"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip

    def watchdog_mails() -> list[dict[str, Any]]:
        box = httpx.get(f"{machine.sandbox}/_sandbox/outbox", timeout=5).json()["messages"]
        return [m for m in box if m["message"]["subject"].startswith("[followup] dagster-daemon")]

    try:
        started = time.monotonic()
        (mail,) = _poll(watchdog_mails, 2 + 120, "the watchdog's mail")
        took = time.monotonic() - started
        message = mail["message"]
        assert "no heartbeat from the daemon" in message["subject"], message["subject"]
        assert {r["emailAddress"]["address"] for r in message["toRecipients"]} == {
            "owner@example.com",
            "backup@example.com",
        }
        time.sleep(4)  # two more looks: the same stall is not mailed again
        assert len(watchdog_mails()) == 1
        assert watchdog.poll() is None, (tmp_path / "watchdog.log").read_text()
    finally:
        os.killpg(watchdog.pid, signal.SIGTERM)  # as systemd and Kubernetes stop it
        try:
            stopped = watchdog.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(watchdog.pid, signal.SIGKILL)
            watchdog.wait()
            stopped = None
        log.close()
    assert stopped == 0, (tmp_path / "watchdog.log").read_text()
    said = (tmp_path / "watchdog.log").read_text()
    assert "watchdog: dagster-daemon: no heartbeat from the daemon" in said, said
    assert took < 2 + 120
