"""Alerts end to end, in process: the real sensors and the ``alert`` job on real Postgres, the
sandbox's Graph and ClickUp over HTTP, a set clock. (Under the real daemon: ``test_daemon.py``.)"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import httpx
import psycopg
import pytest
import sqlalchemy as sa

from followup_pipeline.cli import main
from followup_pipeline.commands.alerts import channel
from followup_pipeline.defs import alerts as capability
from followup_pipeline.defs import build_definitions
from followup_pipeline.defs.alerts.checks import stale_signal
from followup_pipeline.defs.alerts.sensors import ALERT_TAG
from followup_pipeline.domain.alerts import fingerprint
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.watchdog import LOOKED
from followup_pipeline.domain.work import Selection
from followup_pipeline.engine.runs import DEGRADED_TAG
from followup_pipeline.settings import Settings, load_settings
from followup_pipeline.store import alerts as store
from followup_pipeline.store import census, events
from followup_pipeline.store import work as work_store
from followup_pipeline.store.enrichments import set_cursor
from followup_pipeline.store.events import store_delivery
from followup_pipeline_tests.defs.lead_intake.test_intake import _resources as lead_resources

from ..evaluate.conftest import SANDBOX, Machine

#: Monday 2 March 2026, 10:00 in Berlin: a business hour.
MONDAY_10 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
OPS = {
    "ops_owner": "owner@example.com",
    "ops_backup": "backup@example.com",
    "ops_clickup_list_id": SANDBOX.clickup_ops_list_id,
    # Only the test of a silent evaluate has one (these runs have none).
    "alert_evaluate_silence_h": 24,
}


@pytest.fixture
def machine(db_url: str, sandbox: str, db: psycopg.Connection[Any]) -> Machine:
    """The harness on a fresh database and a reset sandbox, with an operations owner, backup
    and list."""
    with httpx.Client(base_url=sandbox, timeout=5) as control:
        control.post("/_sandbox/reset", json={"demo": False}).raise_for_status()
    return Machine(db_url=db_url, sandbox=sandbox, db=db, settings=dict(OPS))


def _sensor(machine: Machine, name: str) -> Any:
    """The sensor ``name`` as the capability builds it from the machine's settings."""
    sensors = capability.build_defs(machine.loaded_settings()).sensors or []
    return next(s for s in sensors if s.name == name)


def _failed_run(
    instance: dg.DagsterInstance, message: str, job: str = "evaluate", kind: type = ValueError
) -> dg.ExecuteInProcessResult:
    @dg.op(name="boom")
    def boom() -> None:
        raise kind(message)

    @dg.job(name=job)
    def failing() -> None:
        boom()

    return failing.execute_in_process(instance=instance, raise_on_error=False)


def _sense_failure(machine: Machine, result: dg.ExecuteInProcessResult, now: datetime) -> None:
    """The ``alerts`` run-failure sensor, evaluated on ``result`` at ``now``."""
    sensor = _sensor(machine, "alerts")
    resources = machine.resources(now)
    with dg.build_run_status_sensor_context(
        sensor_name="alerts",
        dagster_instance=machine.instance,
        dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
        resources={k: resources[k] for k in ("postgres", "clock", "ops_clickup")},
    ) as context:
        sensor(context.for_run_failure())


class Checks:
    """Ticks of ``alert_checks``, its cursor carried from tick to tick as the daemon does."""

    def __init__(self, machine: Machine, *, watching_since: datetime | None = None) -> None:
        self.machine = machine
        self.cursor: str | None = (
            json.dumps({"watching_since": watching_since.isoformat(), "lag_since": None})
            if watching_since is not None
            else None
        )

    def __call__(self, now: datetime) -> list[dg.RunRequest]:
        """One tick at ``now``: the runs it asks for."""
        sensor = _sensor(self.machine, "alert_checks")
        resources = self.machine.resources(now)
        with dg.build_sensor_context(
            instance=self.machine.instance,
            cursor=self.cursor,
            resources={k: resources[k] for k in ("postgres", "clock")},
        ) as context:
            result = sensor(context)
        assert isinstance(result, dg.SensorResult)
        self.cursor = result.cursor
        return list(result.run_requests or [])


def _check(machine: Machine, now: datetime) -> list[dg.RunRequest]:
    """One tick of ``alert_checks`` at ``now``, on a machine watched since the day before."""
    return Checks(machine, watching_since=now - timedelta(days=1))(now)


def _send(machine: Machine, request: dg.RunRequest, now: datetime) -> dg.ExecuteInProcessResult:
    """The ``alert`` run a request asks for, at ``now``."""
    job = machine.job(capability, "alert", machine.resources(now))
    return job.execute_in_process(
        run_config=request.run_config, instance=machine.instance, raise_on_error=False
    )


def _alert_mails(machine: Machine) -> list[dict[str, Any]]:
    """The alert mails Graph accepted: subject, recipients and HTML."""
    return [
        {
            "subject": m["message"]["subject"],
            "to": [r["emailAddress"]["address"] for r in m["message"]["toRecipients"]],
            "html": m["message"]["body"]["content"],
        }
        for m in machine.outbox()
        if m["message"]["subject"].startswith("[followup]")
    ]


def _ops_tasks(machine: Machine) -> list[dict[str, Any]]:
    return machine.tasks(SANDBOX.clickup_ops_list_id)


def test_alerts_five_failures_one_mail_four_held_and_counted_in_the_next(
    machine: Machine,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for minute, deal in enumerate(
        ["6650a1b2c3d4e5f01", "7a50b1b2c3d4e5f99"] * 2 + ["5f3e2d1c0b9a8f7e6"]
    ):
        failed = _failed_run(machine.instance, f"espocrm: HTTP 503 on deal {deal}, try {minute}")
        _sense_failure(machine, failed, MONDAY_10 + timedelta(minutes=12 * minute))
    rows = db.execute("SELECT * FROM alerts ORDER BY id").fetchall()
    assert len(rows) == 5
    assert len({r["fingerprint"] for r in rows}) == 1
    assert [r["action_key"] is not None for r in rows] == [True, False, False, False, False]

    requests = _check(machine, MONDAY_10 + timedelta(hours=1))
    assert len(requests) == 1
    assert str(requests[0].run_key).startswith(f"{rows[0]['action_key']}#")
    assert _send(machine, requests[0], MONDAY_10 + timedelta(hours=1)).success
    # A second tick, and a rerun of the same run, send nothing more.
    assert _check(machine, MONDAY_10 + timedelta(hours=1, minutes=1)) == []
    assert _send(machine, requests[0], MONDAY_10 + timedelta(hours=1)).success
    mails = _alert_mails(machine)
    assert len(mails) == 1
    assert mails[0]["subject"].startswith("[followup] evaluate: ValueError: espocrm: HTTP 503")
    assert sorted(mails[0]["to"]) == ["backup@example.com", "owner@example.com"]
    assert f"/runs/{rows[0]['run_id']}" in mails[0]["html"]

    # Seven hours later the same failure opens a new window: its mail counts the four held.
    again = _failed_run(machine.instance, "espocrm: HTTP 503 on deal 8b7a6c5d4e3f2a1b0, try 9")
    _sense_failure(machine, again, MONDAY_10 + timedelta(hours=7))
    later = _check(machine, MONDAY_10 + timedelta(hours=7))
    assert len(later) == 1
    assert _send(machine, later[0], MONDAY_10 + timedelta(hours=7)).success
    mails = _alert_mails(machine)
    assert len(mails) == 2
    assert "(4 repeats held back)" in mails[1]["subject"]
    assert "4 repeats of this failure" in mails[1]["html"]
    listed = store.listed(db, days=None)
    assert [channel(r) for r in listed].count("mail") == 2
    assert sum(channel(r).startswith("held back, counted by alert:run:") for r in listed) == 4

    # What an operator sees: the last week's rows, all of them with --all.
    db.execute(
        "UPDATE alerts SET recorded_at = now() - interval '8 days' WHERE id = %s", (rows[0]["id"],)
    )
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    assert main(["alerts", "list"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("5 row(s) in 1 alert(s) recorded in the last 7 days (all: --all)\n")
    assert out.count("evaluate: held back, counted by alert:run:") == 4
    assert "evaluate: mail, counts 4 held back" in out
    assert re.search(r"^ +\d+  \d{4}-\d\d-\d\d \d\d:\d\d CES?T  run_failure", out, re.M)  # local
    assert main(["alerts", "list", "--all"]) == 0
    out = capsys.readouterr().out
    assert out.count("  run_failure     evaluate: mail") == 2
    assert out.endswith("6 row(s) in 2 alert(s) in all\n")


def test_alerts_another_failure_is_another_alert(machine: Machine) -> None:
    _sense_failure(machine, _failed_run(machine.instance, "espocrm: HTTP 503"), MONDAY_10)
    _sense_failure(machine, _failed_run(machine.instance, "clickup: HTTP 503"), MONDAY_10)
    _sense_failure(
        machine, _failed_run(machine.instance, "espocrm: HTTP 503", job="register"), MONDAY_10
    )
    assert len(_check(machine, MONDAY_10)) == 3
    # An op's dg.Failure: its message without the qualified class name Dagster puts before it.
    failure = _failed_run(machine.instance, "no such name", job="replay", kind=dg.Failure)
    _sense_failure(machine, failure, MONDAY_10)
    row = machine.db.execute("SELECT message FROM alerts WHERE subject = 'replay'").fetchone()
    assert row == {"message": "Failure: no such name"}
    assert fingerprint("evaluate", "ValueError", "a 1") == fingerprint(
        "evaluate", "ValueError", "a 2"
    )


def _dead_events(db: psycopg.Connection[Any], count: int) -> list[int]:
    ids = []
    for n in range(count):
        row = db.execute(
            "INSERT INTO events (source, event_type, dedup_key, body, headers, status,"
            " last_error, dead_step, attempts, processed_at)"
            " VALUES ('espocrm', 'Opportunity.update', %s, '{}'::bytea, '{}'::jsonb, 'dead',"
            " 'espocrm: HTTP 503 Service Unavailable', 'register', 5, now()) RETURNING id",
            (f"dead-{n}-{datetime.now().timestamp()}",),
        ).fetchone()
        assert row is not None
        ids.append(int(row["id"]))
    return ids


def test_alerts_three_dead_letters_are_three_mails_each_naming_its_own(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    ids = _dead_events(db, 3)
    requests = _check(machine, MONDAY_10)
    assert sorted(r.tags[ALERT_TAG] for r in requests) == sorted(
        f"alert:dead:event:{i}@20260302T090000" for i in ids
    )
    for request in requests:
        assert _send(machine, request, MONDAY_10).success
    assert _check(machine, MONDAY_10 + timedelta(minutes=1)) == []  # recorded once, sent once
    mails = sorted(_alert_mails(machine), key=lambda m: str(m["subject"]))
    assert [m["subject"] for m in mails] == [f"[followup] event:{i}: dead letter" for i in ids]
    for event_id, mail in zip(ids, mails, strict=True):
        assert f"event:{event_id} at " in mail["html"]
        assert "at step register, 5 attempts: espocrm: HTTP 503 Service Unavailable" in mail["html"]
        assert f"followup dead-letters replay event:{event_id}<br>" in mail["html"]
    rows = db.execute("SELECT subject, action_key FROM alerts ORDER BY id").fetchall()
    assert [r["subject"] for r in rows] == [f"event:{i}" for i in ids]
    assert len({r["action_key"] for r in rows}) == 3


def test_alerts_an_outage_of_25_dead_letters_is_ten_mails_then_one_digest_an_hour(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    assert machine.loaded_settings().alert_dead_letters_per_window == 10  # the default
    ids = _dead_events(db, 25)
    requests = _check(machine, MONDAY_10)
    assert len(requests) == 10
    for request in requests:
        assert _send(machine, request, MONDAY_10).success
    # The fifteen past the limit wait for their digest an hour after the last mail.
    assert _check(machine, MONDAY_10 + timedelta(minutes=59)) == []
    held = [r for r in store.listed(db, days=None) if r.action_key is None]
    assert sorted(r.subject for r in held) == sorted(f"event:{i}" for i in ids[10:])
    assert {channel(r) for r in held} == {"held back (the next dead-letter digest will name it)"}
    hour = MONDAY_10 + timedelta(hours=1)
    (request,) = _check(machine, hour)
    assert request.tags[ALERT_TAG] == f"alert:dead:digest:event:{ids[10]}+14@20260302T100000"
    assert _send(machine, request, hour).success
    subjects = sorted(m["subject"] for m in _alert_mails(machine))
    digest = f"[followup] 15 dead letters held back: event:{ids[10]} and 14 more"
    assert subjects == sorted([f"[followup] event:{i}: dead letter" for i in ids[:10]] + [digest])
    (mail,) = [m for m in _alert_mails(machine) if m["subject"] == digest]
    for event_id in ids[10:]:
        assert f"event:{event_id} at " in mail["html"]
    assert "15 dead letters (died at " in mail["html"]
    assert "followup dead-letters list" in mail["html"]
    assert "at step register, 5 attempts: espocrm: HTTP 503" in mail["html"]

    # More dead letters in the same window: held for the next digest, an hour after that one.
    later = _dead_events(db, 5)
    assert _check(machine, hour + timedelta(minutes=30)) == []
    after = hour + timedelta(hours=1)
    (request,) = _check(machine, after)
    assert request.tags[ALERT_TAG] == f"alert:dead:digest:event:{later[0]}+4@20260302T110000"
    assert _send(machine, request, after).success
    assert _alert_mails(machine)[-1]["subject"] == (
        f"[followup] 5 dead letters held back: event:{later[0]} and 4 more"
    )
    assert len(_alert_mails(machine)) == 12
    assert db.execute("SELECT count(*) AS n FROM alerts WHERE action_key IS NULL").fetchone() == {
        "n": 0
    }
    assert _check(machine, after + timedelta(minutes=1)) == []


def test_alerts_graph_outage_goes_to_the_operations_list(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    _sense_failure(machine, _failed_run(machine.instance, "clickup: HTTP 500"), MONDAY_10)
    machine.fault(vendor="graph", kind="outage", method="POST")
    (request,) = _check(machine, MONDAY_10)
    result = _send(machine, request, MONDAY_10)
    assert result.success
    assert machine.outcome(result) == "partial"
    assert _alert_mails(machine) == []
    (task,) = _ops_tasks(machine)
    assert task["name"].startswith("[followup] evaluate: ValueError: clickup: HTTP 500")
    assert "mail failed" in task["description"]
    # Sent: no further run is asked for, and a rerun creates no second task.
    assert _check(machine, MONDAY_10 + timedelta(hours=1)) == []
    assert _send(machine, request, MONDAY_10).success
    assert len(_ops_tasks(machine)) == 1
    (row,) = store.listed(db, days=7)
    assert channel(row) == f"clickup task {task['id']}"


def test_alerts_a_failed_alert_run_goes_to_clickup_only(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    _sense_failure(machine, _failed_run(machine.instance, "clickup: HTTP 500"), MONDAY_10)
    machine.fault(vendor="graph", kind="outage", method="POST")
    machine.fault(vendor="clickup", kind="outage", method="POST", count=1)
    (request,) = _check(machine, MONDAY_10)
    failed = _send(machine, request, MONDAY_10)
    assert not failed.success
    before = db.execute("SELECT count(*) AS n FROM alerts").fetchone()
    _sense_failure(machine, failed, MONDAY_10)
    assert db.execute("SELECT count(*) AS n FROM alerts").fetchone() == before  # no alert
    (task,) = _ops_tasks(machine)
    assert task["name"].startswith("[followup] alert run failed")
    assert failed.run_id in task["description"]
    assert _alert_mails(machine) == []
    # The alert itself is tried again by a later run (a new run key after 15 minutes).
    db.execute("UPDATE alerts SET recorded_at = recorded_at - interval '16 minutes'")
    (retry,) = _check(machine, MONDAY_10 + timedelta(minutes=16))
    assert retry.run_key == f"{request.tags[ALERT_TAG]}#1"


def _event(db: psycopg.Connection[Any], key: str, received_at: datetime) -> int:
    row = db.execute(
        "INSERT INTO events (source, event_type, dedup_key, body, headers, status, received_at)"
        " VALUES ('espocrm', 'Opportunity.update', %s, '{}'::bytea, '{}'::jsonb, 'pending', %s)"
        " RETURNING id",
        (key, received_at),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def test_alerts_a_late_event_and_a_silent_evaluate_raise_one_alert_each(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.settings["alert_evaluate_silence_h"] = 2
    machine.settings["evaluate_hours_start"] = 7  # a window: silent since its first hour
    late = _event(db, "late-1", MONDAY_10 - timedelta(minutes=20))
    checks = Checks(machine, watching_since=MONDAY_10 - timedelta(days=1))
    # 08:30: evaluate has been silent for only 1.5 business hours, and the event is not late.
    assert checks(MONDAY_10 - timedelta(minutes=90)) == []
    requests = checks(MONDAY_10)
    kinds = sorted(r.tags[ALERT_TAG].split(":")[1] for r in requests)
    assert kinds == ["evaluate", "pending"]
    for request in requests:
        assert _send(machine, request, MONDAY_10).success
    assert checks(MONDAY_10 + timedelta(minutes=5)) == []  # once per episode, not every tick
    subjects = sorted(m["subject"] for m in _alert_mails(machine))
    assert subjects[0].startswith("[followup] evaluate: no clean run for 3 h 00 min")
    assert subjects[1].startswith(f"[followup] register: event:{late} (espocrm")

    # The events catch up; a later lag is a new episode, and a new alert at once.
    db.execute("UPDATE events SET status = 'done' WHERE id = %s", (late,))
    assert checks(MONDAY_10 + timedelta(minutes=10)) == []
    _event(db, "late-2", MONDAY_10)
    (again,) = checks(MONDAY_10 + timedelta(minutes=30))
    assert str(again.run_key).startswith("alert:pending:")


def test_alerts_evaluate_is_expected_in_its_hours_of_business_days_only(
    machine: Machine,
) -> None:
    machine.settings["alert_evaluate_silence_h"] = 2
    settings = machine.loaded_settings()
    calendar = BusinessCalendar(country="DE")
    long_ago = MONDAY_10 - timedelta(days=7)

    def silent(now: datetime, *, within: Settings = settings) -> bool:
        found = stale_signal(
            None, now=now, watching_since=long_ago, settings=within, calendar=calendar
        )
        return found is not None

    assert silent(MONDAY_10)
    assert not silent(MONDAY_10 - timedelta(days=1))  # Sunday
    assert silent(MONDAY_10 + timedelta(hours=10))  # 20:00: evaluate runs every hour
    assert silent(MONDAY_10 - timedelta(hours=7))  # 03:00, silent since 00:00
    assert not silent(MONDAY_10 - timedelta(hours=8, minutes=30))  # 01:30: 90 min since 00:00
    window = settings.model_copy(update={"evaluate_hours_start": 7, "evaluate_hours_end": 19})
    assert not silent(MONDAY_10 + timedelta(hours=10), within=window)  # after its window
    assert not silent(datetime(2026, 4, 6, 9, 0, tzinfo=UTC))  # Easter Monday
    # Silent since its last success at 12:00, not since the morning.
    last = MONDAY_10 + timedelta(hours=2)
    found = stale_signal(
        last, now=last + timedelta(hours=3), watching_since=long_ago, settings=settings,
        calendar=calendar,
    )  # fmt: skip
    assert found is not None
    assert found.message.startswith("no clean run for 3 h 00 min")


def test_alerts_a_machine_started_late_is_not_silent_since_the_morning(machine: Machine) -> None:
    machine.settings["alert_evaluate_silence_h"] = 2
    # Started at 10:00 with no evaluate yet: its first tick raises nothing, and neither does
    # 11:59; at 12:01 two business hours have passed without a success.
    checks = Checks(machine)
    assert checks(MONDAY_10) == []
    assert checks(MONDAY_10 + timedelta(hours=1, minutes=59)) == []
    (request,) = checks(MONDAY_10 + timedelta(hours=2, minutes=1))
    assert str(request.run_key).startswith("alert:evaluate:")


def test_alerts_a_failure_the_sensor_missed_is_found_by_the_checks(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    # The run-failure sensor could not record it (Postgres was down): Dagster moved on.
    failed = _failed_run(machine.instance, "store: the database is unreachable")
    assert _check(machine, MONDAY_10) == []  # the sensor's for two minutes
    storage: Any = machine.instance.run_storage
    with storage.connect() as conn:  # three minutes pass
        conn.execute(
            sa.text("UPDATE runs SET update_timestamp = :at"),
            {"at": datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=3)},
        )
    (request,) = _check(machine, MONDAY_10)
    row = db.execute("SELECT source, action_key FROM alerts").fetchone()
    assert row == {
        "source": f"run:{failed.run_id}",
        "action_key": request.tags[ALERT_TAG],
    }
    _sense_failure(machine, failed, MONDAY_10)  # the sensor, late: nothing new
    assert db.execute("SELECT count(*) AS n FROM alerts").fetchone() == {"n": 1}


def test_alerts_dead_letters_from_before_alerting_are_not_news(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    _dead_events(db, 3)
    checks = Checks(machine)  # the first tick on this machine
    assert checks(MONDAY_10) == []
    rows = db.execute("SELECT action_key, counted_in FROM alerts").fetchall()
    assert rows == [{"action_key": None, "counted_in": "known before alerting"}] * 3
    (new,) = _dead_events(db, 1)
    (request,) = checks(MONDAY_10 + timedelta(minutes=1))
    assert request.tags[ALERT_TAG].startswith(f"alert:dead:event:{new}@")


def test_alerts_wait_when_nobody_is_set_to_receive_them(machine: Machine) -> None:
    for name in ("ops_owner", "ops_backup", "ops_clickup_list_id"):
        machine.settings[name] = None
    _sense_failure(machine, _failed_run(machine.instance, "clickup: HTTP 500"), MONDAY_10)
    assert _check(machine, MONDAY_10) == []  # no run that can only fail
    machine.settings.update(OPS)
    assert len(_check(machine, MONDAY_10)) == 1


def test_alerts_a_mail_that_went_though_graph_answered_500_is_not_doubled(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    _sense_failure(machine, _failed_run(machine.instance, "clickup: HTTP 500"), MONDAY_10)
    machine.fault(
        vendor="graph", kind="apply_then_error", method="POST", path="/sendMail$", count=1
    )
    (request,) = _check(machine, MONDAY_10)
    result = _send(machine, request, MONDAY_10)
    assert result.success
    assert machine.outcome(result) == "ok"
    assert len(_alert_mails(machine)) == 1  # it went, once
    assert _ops_tasks(machine) == []  # and Sent Items said so: no second channel
    (row,) = store.listed(db, days=7)
    assert channel(row) == "mail"


def test_alerts_a_dry_run_records_them_and_sends_nothing(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.settings["dry_run"] = True
    _sense_failure(machine, _failed_run(machine.instance, "clickup: HTTP 500"), MONDAY_10)
    (request,) = _check(machine, MONDAY_10)
    result = _send(machine, request, MONDAY_10)
    assert result.success
    assert result.output_for_node("send_alerts")["suppressed_dry_run"] == 1
    assert _alert_mails(machine) == []
    assert _ops_tasks(machine) == []
    key = request.tags[ALERT_TAG]
    row = db.execute("SELECT outcome, reason FROM actions WHERE idempotency_key = %s", (key,))
    assert row.fetchone() == {"outcome": "suppressed", "reason": "dry_run"}
    assert _check(machine, MONDAY_10 + timedelta(hours=5)) == []  # not retried: it is settled


def test_alerts_a_dry_run_holds_the_operations_task_too(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.settings.update(dry_run=True, ops_owner=None, ops_backup=None)
    _sense_failure(machine, _failed_run(machine.instance, "clickup: HTTP 500"), MONDAY_10)
    (request,) = _check(machine, MONDAY_10)
    assert _send(machine, request, MONDAY_10).success
    assert _ops_tasks(machine) == []
    key = f"{request.tags[ALERT_TAG]}:clickup"
    row = db.execute("SELECT outcome, reason FROM actions WHERE idempotency_key = %s", (key,))
    assert row.fetchone() == {"outcome": "suppressed", "reason": "dry_run"}


def test_alerts_failed_alert_runs_of_one_kind_make_one_task(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    for _ in range(3):
        failed = _failed_run(machine.instance, "graph: HTTP 503 and clickup: HTTP 503", job="alert")
        _sense_failure(machine, failed, MONDAY_10)
    (task,) = _ops_tasks(machine)
    assert task["name"].startswith("[followup] alert run failed: ")
    assert db.execute("SELECT count(*) AS n FROM alerts").fetchone() == {"n": 0}


def test_alerts_a_dead_letter_that_fails_again_on_replay_is_closed_by_a_person_and_goes_quiet(
    machine: Machine,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A paid checkout without its customer's details: it can never become a lead.
    paid = {"id": "cs_9", "object": "checkout.session", "amount_total": 4900, "currency": "eur",
            "payment_status": "paid"}  # fmt: skip
    body = json.dumps({"id": "evt_9", "type": "checkout.session.completed",
                       "data": {"object": paid}}).encode()  # fmt: skip
    event = store_delivery(db, source="payment", event_type="checkout.session.completed",
                           body=body, headers={}, delivery_id="evt_9")  # fmt: skip
    settings = {**OPS, "lead_intake_mode": "live"}
    intake = build_definitions(load_settings(**settings)).resolve_job_def("lead_intake")
    resources = lead_resources(machine.db_url, machine.sandbox)
    assert intake.execute_in_process(instance=machine.instance, resources=resources).success
    assert db.execute("SELECT status FROM events").fetchone() == {"status": "dead"}
    (request,) = _check(machine, MONDAY_10)
    assert _send(machine, request, MONDAY_10).success
    [mail] = _alert_mails(machine)
    assert mail["to"] == ["owner@example.com", "backup@example.com"]
    # Replayed, it fails again: news, alerted once more (not sent yet when the person decides).
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    assert main(["work", "replay", f"event:{event.event_id}", "--by", "Olga"]) == 0
    assert intake.execute_in_process(instance=machine.instance, resources=resources).success
    (again,) = _check(machine, MONDAY_10 + timedelta(minutes=5))
    [item] = work_store.select(db, Selection())
    assert (item.kind, item.pipeline, item.failures, item.replays) == (
        "dead_event", "lead_intake", 2, 1
    )  # fmt: skip
    # A person closes it with a reason: audited; the gauges count it no more; the alert that
    # had not reached anyone yet goes nowhere, and no further one is raised.
    why = "no customer on the checkout: refunded by hand"
    assert main(["work", "close", str(item.id), "--by", "Olga", "--reason", why]) == 0
    audited = db.execute("SELECT actor, action, subject, reason FROM audit_log").fetchall()
    assert [(a["actor"], a["action"], a["reason"]) for a in audited] == [
        ("Olga", "work.replay", None), ("Olga", "work.close", why)
    ]  # fmt: skip
    assert events.gauges(db)["dead"] == 0
    assert work_store.counts(db) == []
    assert _send(machine, again, MONDAY_10 + timedelta(minutes=6)).success
    assert len(_alert_mails(machine)) == 1
    assert store.unsent(db) == []
    assert _check(machine, MONDAY_10 + timedelta(hours=2)) == []
    capsys.readouterr()
    assert main(["work", "replay", "--pipeline", "lead_intake"]) == 0  # nothing waits
    assert "nothing to replay" in capsys.readouterr().out


def test_alerts_a_crm_down_for_three_hourly_runs_is_one_alert_and_one_recovered(
    machine: Machine,
) -> None:
    deals = [machine.deal(name="Alpha"), machine.deal(name="Beta")]
    machine.evaluate(MONDAY_10 - timedelta(days=7))  # their watches open; step 1 due on Monday
    checks = Checks(machine, watching_since=MONDAY_10 - timedelta(days=8))
    machine.fault(vendor="espocrm", kind="error", status=503)
    for hour in range(3):
        now = MONDAY_10 + timedelta(hours=hour)
        result = machine.evaluate(now)
        # Green in the UI, and its outcome says what it skipped and why.
        assert result.success
        assert machine.outcome(result) == "partial"
        run = machine.instance.get_run_by_id(result.run_id)
        assert run is not None
        assert run.tags[DEGRADED_TAG].startswith("espocrm: ")
        late = work_store.select(machine.db, Selection(kinds=("step",)))
        requests = checks(now + timedelta(minutes=5))
        if hour == 0:
            assert late == []  # due at 7:00 in Berlin, 2 h ago: within its grace (3 h)
            assert requests == []
        if hour == 1:
            # Later than its grace: late means owned, on the list with the operations owner.
            assert sorted(item.what.split(",")[0] for item in late) == sorted(
                f"step 1 of deal {deal}" for deal in deals
            )
            assert {item.owner for item in late} == {"owner@example.com"}
            assert all("HTTP 503" in item.reason for item in late), [i.reason for i in late]
            # Not mailed on their own while the CRM keeps evaluate partial: its alert says.
            assert requests == []  # (and two partial runs are not an episode yet)
    (request,) = requests
    assert request.tags[ALERT_TAG].startswith("alert:degraded:")
    assert _send(machine, request, MONDAY_10 + timedelta(hours=2, minutes=6)).success
    [mail] = _alert_mails(machine)
    assert mail["subject"].startswith("[followup] evaluate: 3 runs in a row ended partial")
    assert "espocrm" in mail["html"]
    assert "HTTP 503" in mail["html"]
    assert all(f"deal {deal}" in mail["html"] for deal in deals), mail["html"]
    assert "(2 now: followup work list --kind step)" in mail["html"], mail["html"]
    assert checks(MONDAY_10 + timedelta(hours=2, minutes=10)) == []  # one alert an episode
    # The CRM is back: the next run ends clean, and one "recovered" goes out.
    with machine.control() as control:
        control.delete("/faults").raise_for_status()
    assert machine.outcome(machine.evaluate(MONDAY_10 + timedelta(hours=4))) == "ok"
    (recovered,) = checks(MONDAY_10 + timedelta(hours=4, minutes=5))
    assert recovered.tags[ALERT_TAG].startswith("alert:recovered:")
    assert _send(machine, recovered, MONDAY_10 + timedelta(hours=4, minutes=6)).success
    subjects = [m["subject"] for m in _alert_mails(machine)]
    assert len(subjects) == 2, subjects
    assert "recovered" in subjects[1], subjects
    assert checks(MONDAY_10 + timedelta(hours=5)) == []
    # The steps fired once the CRM answered again: their items closed by themselves.
    closed = work_store.select(machine.db, Selection(kinds=("step",), states=("closed",)))
    assert [(item.closed_how, item.closed_note) for item in closed] == [("resolved", "fired")] * 2
    # The week's operations look says it with causes: the late steps (their step and the kind
    # of error) and the degraded runs by vendor.
    week = machine.job(capability, "ops_weekly", machine.resources(MONDAY_10 + timedelta(hours=6)))
    assert week.execute_in_process(instance=machine.instance).success
    [look] = [
        m["message"] for m in machine.outbox() if m["message"]["subject"].startswith("Betrieb")
    ]
    text = look["body"]["content"]
    assert "2× deal_followup: espocrm HTTP 503" in text, text
    assert "evaluate: 3 Läufe wegen espocrm" in text, text
    assert {r["emailAddress"]["address"] for r in look["toRecipients"]} == {
        "owner@example.com",
        "backup@example.com",
    }


def test_alerts_a_watched_stage_whose_deals_moved_away_is_named_by_the_census(
    machine: Machine,
) -> None:
    """The source's five-day failure: every run green while one watched stage lists nothing.
    With ``FOLLOWUP_CENSUS_QUIET_DAYS=2`` the census alerts on the second quiet business day."""
    machine.settings["census_quiet_days"] = 2
    machine.deal(name="Alpha", stage="Proposal")
    moved = machine.deal(name="Beta", stage="Negotiation")
    checks = Checks(machine, watching_since=MONDAY_10 - timedelta(days=1))
    assert machine.outcome(machine.evaluate(MONDAY_10)) == "ok"
    assert checks(MONDAY_10 + timedelta(minutes=5)) == []
    read = census.since(machine.db, MONDAY_10.date(), zone="Europe/Berlin")
    assert [(r.stage, r.listed, r.entered) for r in read] == [
        ("Negotiation", 1, 1),
        ("Proposal", 1, 1),
    ]
    # The pipeline changes in the CRM: Negotiation's deals now sit in a stage nobody watches.
    machine.move(moved, "Prospecting")
    for day in (1, 2):  # Tuesday and Wednesday, every run green
        now = MONDAY_10 + timedelta(days=day)
        assert machine.outcome(machine.evaluate(now)) == "ok"
        requests = checks(now + timedelta(minutes=5))
        if day == 1:
            assert requests == []  # one quiet business day: not yet
    (request,) = requests
    assert request.tags[ALERT_TAG].startswith("alert:census:")
    assert _send(machine, request, MONDAY_10 + timedelta(days=2, minutes=6)).success
    [mail] = _alert_mails(machine)
    assert mail["subject"].startswith("[followup] watched stage Negotiation: the CRM lists no deal")
    assert "since 2026-03-03" in mail["html"]
    assert checks(MONDAY_10 + timedelta(days=2, minutes=10)) == []  # once for this quiet spell


def test_alerts_a_watchdog_that_stopped_looking_is_alerted_from_inside_once(
    machine: Machine,
) -> None:
    """The watchdog watches the daemon from outside; the alert checks, inside, watch it in
    turn: one alert per silence, counted from its last look (by the wall clock)."""
    checks = Checks(machine, watching_since=MONDAY_10 - timedelta(days=1))
    assert checks(MONDAY_10) == []  # no watchdog has looked here yet: doctor says so
    set_cursor(machine.db, LOOKED, datetime.now(UTC) - timedelta(minutes=20))
    (request,) = checks(MONDAY_10 + timedelta(minutes=1))
    assert request.tags[ALERT_TAG].startswith("alert:watchdog:")
    [row] = [r for r in store.listed(machine.db, days=None) if r.kind == "watchdog"]
    assert row.subject == "followup watchdog"
    assert row.message.startswith("no look since 20 min")
    assert _send(machine, request, MONDAY_10 + timedelta(minutes=1)).success
    [mail] = _alert_mails(machine)
    assert mail["subject"].startswith("[followup] followup watchdog: no look since 20 min")
    assert checks(MONDAY_10 + timedelta(minutes=2)) == []  # once for this silence
    set_cursor(machine.db, LOOKED, datetime.now(UTC) - timedelta(minutes=1))  # it looks again
    assert checks(MONDAY_10 + timedelta(minutes=3)) == []
