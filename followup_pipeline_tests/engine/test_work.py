"""The one list of work waiting for a person, on a real Postgres through the commands an operator
types: an upgrade brings today's catch-up queue and dead letters in with their owners; a dead
lead event, a dead deal task, a reminder that failed every attempt and content not approved wait
in one list, each with owner and backup, and ``dead-letters`` and ``lms queue`` show their parts;
a bulk acknowledge by kind is audited, and ``--dry`` changes nothing. (The Dagster side, alerts
and replays: defs/alerts/test_sensor.py, defs/lead_intake/test_crm_upsert.py.)"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.domain.work import Selection, parse_since, tenant_of_key
from followup_pipeline.engine import late, work
from followup_pipeline.ingress.metrics import _work_lines
from followup_pipeline.settings import load_settings
from followup_pipeline.store import lms
from followup_pipeline.store import work as store
from followup_pipeline.store.db import connect
from followup_pipeline.store.migrate import migrate

OPS, OPS_BACKUP = "ops@example.com", "ops-backup@example.com"
OWNER, BACKUP = "owner@academy.example", "backup@academy.example"
#: The schema before the list (0025).
BEFORE_THE_LIST = 24


def _tenant(conn: psycopg.Connection[Any]) -> lms.Tenant:
    tenant = lms.Tenant(id="berlin", name="Academy Berlin", moodle_url="https://lms.example",
                        token_ref="BERLIN", time_zone="Europe/Berlin",
                        sender="academy@example.com", owner=OWNER, backup=BACKUP)  # fmt: skip
    lms.save_tenant(conn, tenant)
    return tenant


def _dead_event(conn: psycopg.Connection[Any], source: str, step: str, error: str) -> int:
    row = conn.execute(
        "INSERT INTO events (source, event_type, dedup_key, body, status, last_error, dead_step,"
        " attempts, processed_at) VALUES (%s, 'x', %s, '{}'::bytea, 'dead', %s, %s, 3, now())"
        " RETURNING id",
        (source, f"{source}-{step}-{datetime.now().timestamp()}", error, step),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def _dead_action(conn: psycopg.Connection[Any], key: str, kind: str) -> None:
    conn.execute(
        "INSERT INTO actions (idempotency_key, kind, due_at, time_zone, outcome, attempts,"
        " last_error) VALUES (%s, %s, now(), 'UTC', 'failed', 5, 'HTTP 503')",
        (key, kind),
    )


@pytest.fixture
def ops(monkeypatch: pytest.MonkeyPatch, db_url: str) -> None:
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_OPS_OWNER", OPS)
    monkeypatch.setenv("FOLLOWUP_OPS_BACKUP", OPS_BACKUP)


def test_work_migrate_brings_the_queue_and_the_dead_letters_in_with_their_owners(
    database_factory: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = database_factory()
    migrate(url, target=BEFORE_THE_LIST)
    with connect(url, autocommit=True) as conn:
        # The tenant as that schema had it (today's upsert writes columns it had not yet).
        conn.execute(
            "INSERT INTO tenants (id, name, moodle_url, token_ref, time_zone, sender, owner,"
            " backup) VALUES ('berlin', 'Academy Berlin', 'https://lms.example', 'BERLIN',"
            " 'Europe/Berlin', 'academy@example.com', %s, %s)",
            (OWNER, BACKUP),
        )
        expired = "suppressed: expired"
        for key, closed in (("lms:berlin:7:1:before:2026-03-09", None),
                            ("lms:berlin:8:1:before:2026-03-09", expired)):  # fmt: skip
            conn.execute(
                "INSERT INTO lms_queue (tenant_id, action_key, kind, what, reason, owner, backup,"
                " queued_at, updated_at, closed_at, closed_how) VALUES ('berlin', %s,"
                " 'reminder', 'quiz 1 for learner 7', 'no e-mail address', %s, %s, now(), now(),"
                " %s, %s)",
                (key, OWNER, BACKUP, None if closed is None else datetime.now(UTC), closed),
            )
        event = _dead_event(conn, "site-form", "0:crm_upsert", "CRM Lead search: 503")
        _dead_action(conn, "task:41:2", "task")
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", url)
    monkeypatch.setenv("FOLLOWUP_OPS_OWNER", OPS)
    assert main(["migrate"]) == 0
    assert "work waiting for a person: 2 item(s) taken in" in capsys.readouterr().out
    with connect(url, autocommit=True) as conn:
        items = store.select(conn, Selection(states=("open", "acknowledged", "closed")))
        queue = conn.execute("SELECT to_regclass('followup.lms_queue') AS t").fetchone()
        to_alert = store.to_alert(conn)
    found = {(i.subject, i.pipeline, i.kind, i.owner, i.state, i.closed_how) for i in items}
    assert found == {
        ("action:lms:berlin:7:1:before:2026-03-09", "learning", "reminder", OWNER, "open", None),
        ("action:lms:berlin:8:1:before:2026-03-09", "learning", "reminder", OWNER, "closed",
         "expired"),
        (f"event:{event}", "lead_intake", "dead_event", OPS, "open", None),
        ("action:task:41:2", "deal_followup", "dead_action", OPS, "open", None),
    }  # fmt: skip
    assert queue == {"t": None}
    # They were alerted before the list existed: none is news.
    assert to_alert == []


def test_work_one_list_of_three_pipelines_and_the_views_show_their_parts(
    db: psycopg.Connection[Any], ops: None, capsys: pytest.CaptureFixture[str]
) -> None:
    tenant = _tenant(db)
    lead = _dead_event(db, "payment", "0:normalise", "data.object.customer_details: missing")
    _dead_action(db, "task:7:1", "task")
    reminder = "lms:berlin:7:3:before:2026-03-09"
    _dead_action(db, reminder, "reminder")
    settings = load_settings()
    late.park(db, action_key="lms-publish:berlin:week-2:v1", kind="publication", tenant=tenant,
              what="week-2 v1", reason="due and not approved", settings=settings,
              at=datetime.now(UTC))  # fmt: skip
    assert main(["work", "list"]) == 0
    listed = capsys.readouterr().out
    assert f"lead_intake dead_event: event:{lead} at step 0:normalise" in listed
    assert f"owner {OPS} (backup {OPS_BACKUP})" in listed
    assert f"learning reminder: action:{reminder}" in listed
    assert "learning publication: action:lms-publish:berlin:week-2:v1" in listed
    assert f"owner {OWNER} (backup {BACKUP})" in listed
    assert listed.rstrip().endswith("4 open")
    assert main(["dead-letters", "list"]) == 0
    dead = capsys.readouterr().out
    assert f"event:{lead}" in dead
    assert "action:task:7:1" in dead
    assert "lms" not in dead
    assert main(["lms", "queue"]) == 0
    queued = capsys.readouterr().out
    assert reminder in queued
    assert "week-2" in queued
    assert f"event:{lead}" not in queued
    assert "task:7:1" not in queued
    # Its raw data is where an operator can see it: the event's body, the action's row.
    assert main(["dead-letters", "show", f"event:{lead}"]) == 0
    shown = capsys.readouterr().out
    assert '"last_error": "data.object.customer_details: missing"' in shown
    assert '"body": "{}"' in shown


def test_work_bulk_acknowledge_by_kind_is_audited_and_dry_changes_nothing(
    db: psycopg.Connection[Any], ops: None, capsys: pytest.CaptureFixture[str]
) -> None:
    for number in range(3):
        _dead_action(db, f"task:9:{number}", "task")
    event = _dead_event(db, "espocrm", "register", "espocrm: HTTP 503")
    assert main(["work", "ack", "--kind", "dead_action", "--dry"]) == 0
    dry = capsys.readouterr().out
    assert "would acknowledge 3 item(s) (state open, kind dead_action)" in dry
    assert "nothing changed" in dry
    assert store.select(db, Selection(states=("acknowledged",))) == []
    assert db.execute("SELECT count(*) AS n FROM audit_log").fetchone() == {"n": 0}
    # Without a filter, a bulk action asks for one (or --all).
    assert main(["work", "ack"]) == 2
    capsys.readouterr()
    assert main(["work", "ack", "--kind", "dead_action", "--by", "Olga", "--reason", "mine"]) == 0
    assert "3 acknowledged, 0 refused" in capsys.readouterr().out
    acked = store.select(db, Selection(states=("acknowledged",)))
    assert sorted(i.subject for i in acked) == [f"action:task:9:{n}" for n in range(3)]
    assert {(i.acknowledged_by, i.alerted) for i in acked} == {("Olga", 1)}
    audited = db.execute("SELECT actor, action, reason FROM audit_log ORDER BY id").fetchall()
    assert audited == [{"actor": "Olga", "action": "work.acknowledge", "reason": "mine"}] * 3
    # Acknowledged ones stand apart in the gauges; the open one still counts as open.
    lines = _work_lines(
        {f"work|{c.state}|{c.pipeline}|{c.kind}|{c.owner}": c.items for c in store.counts(db)}
    )
    assert 'followup_work_items{state="open"} 1' in lines
    assert 'followup_work_items{state="acknowledged"} 3' in lines
    assert (
        f'followup_work_acknowledged{{pipeline="deal_followup",kind="dead_action",owner="{OPS}"}} 3'
        in lines
    )
    assert store.select(db, Selection(states=("open",)))[0].subject == f"event:{event}"


def test_work_an_action_done_by_a_later_run_closes_its_item_by_itself(
    db: psycopg.Connection[Any],
) -> None:
    _dead_action(db, "task:5:1", "task")
    settings = load_settings()
    now = datetime.now(UTC)
    assert work.sync(db, settings, at=now).new == 1
    db.execute(
        "UPDATE actions SET outcome = 'accepted', provider_ref = 'cu1', replayed_attempts = 5"
        " WHERE idempotency_key = 'task:5:1'"
    )
    assert work.sync(db, settings, at=now).closed == 1
    [item] = store.select(db, Selection(states=("closed",)))
    assert (item.closed_how, item.closed_note) == ("resolved", "accepted")
    assert work.sync(db, settings, at=now + timedelta(minutes=1)) == work.Synced()


def test_work_words() -> None:
    now = datetime(2026, 12, 3, 10, 30, tzinfo=UTC)
    assert parse_since("today", zone="Europe/Berlin", now=now) == datetime(
        2026, 12, 2, 23, 0, tzinfo=UTC
    )
    assert parse_since("6h", zone="UTC", now=now) == now - timedelta(hours=6)
    with pytest.raises(ValueError, match="expected today"):
        parse_since("this morning", zone="UTC", now=now)
    assert tenant_of_key("lms:weekly:berlin:2026-W49") == "berlin"
    assert tenant_of_key("lms-cert:hamburg:1:2:0") == "hamburg"
    assert tenant_of_key("task:1:2") is None
    with pytest.raises(ValueError, match="kind 'bogus'"):
        Selection(kinds=("bogus",))


def test_work_refusals_are_said_and_an_unhandled_event_is_replayed_by_name(
    db: psycopg.Connection[Any], ops: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bare replay in the dead letters' view replays nothing: it asks what.
    assert main(["dead-letters", "replay"]) == 2
    assert "replay what?" in capsys.readouterr().err
    # An item that can never be replayed is shown as such by --dry, and refused for real.
    poison = _dead_event(db, "espocrm", "register", "broken")
    db.execute(
        "INSERT INTO step_completions (event_id, key, result) VALUES (%s, %s,"
        ' \'{"outcome": "invalid", "reason": "id is not up to 64"}\'::jsonb)',
        (poison, f"{poison}:0:invalid"),
    )
    assert main(["work", "replay", "--kind", "invalid_item", "--dry"]) == 0
    dry = capsys.readouterr().out
    assert "would replay 0 item(s)" in dry
    assert "would refuse: an invalid item can never be done as it is" in dry
    assert main(["work", "replay", "--kind", "invalid_item"]) == 1
    assert "not replayed: an invalid item can never be done as it is" in capsys.readouterr().out
    assert main(["work", "replay", "99999"]) == 1
    assert "no such waiting item #99999" in capsys.readouterr().out
    # An event stored before its source had a handler waits in no list: named, it is replayed.
    row = db.execute(
        "INSERT INTO events (source, event_type, dedup_key, body, status) VALUES"
        " ('espocrm', 'x', 'u1', '[]'::bytea, 'unhandled') RETURNING id"
    ).fetchone()
    assert row is not None
    assert main(["work", "replay", f"event:{row['id']}", "--by", "Olga"]) == 0
    assert f"event:{row['id']}: replayed by name" in capsys.readouterr().out
    status = db.execute("SELECT status FROM events WHERE id = %s", (row["id"],)).fetchone()
    assert status == {"status": "pending"}
    assert db.execute(
        "SELECT actor, subject FROM audit_log WHERE action = 'work.replay'"
    ).fetchall() == [{"actor": "Olga", "subject": f"event:{row['id']}"}]


def test_work_a_late_step_closes_when_planned_again_and_a_decision_skips_the_steps_before_it(
    db: psycopg.Connection[Any], ops: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from followup_pipeline.domain.calendar import BusinessCalendar
    from followup_pipeline.store.cadences import Plan
    from followup_pipeline.store.steps import replan_step, steps_of
    from followup_pipeline.store.watches import Subject, insert_watch

    plan = Plan("default", (5, 12, 21), "Europe/Berlin", BusinessCalendar("DE"))
    opened = datetime(2026, 2, 2, 9, tzinfo=UTC)
    deals = [Subject(f"deal-{n}", f"Deal {n}", "Proposal") for n in (1, 2)]
    watches = [
        insert_watch(db, subject=deal, plan=plan, registered_at=opened, registered_by="reconcile")
        for deal in deals
    ]
    first, second = (w for w in watches if w is not None)
    settings = load_settings()
    parked_at = datetime(2026, 3, 2, 12, tzinfo=UTC)  # steps 1 and 2 of both are due by then
    for watch_id in (first, second):
        for step_no in (1, 2):
            late.park_step(db, watch_id=watch_id, step_no=step_no, what=f"step {step_no}",
                           reason="late: espocrm", settings=settings, at=parked_at)  # fmt: skip
    assert work.sync(db, settings, at=parked_at).closed == 0
    # Activity planned the first deal's steps again, for later days: their items close.
    for step_no, due_on in ((1, datetime(2026, 3, 9).date()), (2, datetime(2026, 3, 18).date())):
        replan_step(db, watch_id=first, step_no=step_no, due_on=due_on)
    assert work.sync(db, settings, at=parked_at).closed == 2
    notes = {i.subject: i.closed_note for i in store.select(db, Selection(states=("closed",)))}
    assert notes == {
        f"step:{first}:1": "planned again for 2026-03-09",
        f"step:{first}:2": "planned again for 2026-03-18",
    }
    # A person closes the second deal's step 2: step 1, before it, is skipped with it (no run
    # may fire it in its place), and its own item closes by itself.
    capsys.readouterr()
    assert main(["work", "close", f"step:{second}:2", "--by", "Ops", "--reason", "lost"]) == 0
    assert [(s.step_no, s.skip_reason) for s in steps_of(db, second)] == [
        (1, "decided"), (2, "decided"), (3, None)
    ]  # fmt: skip
    assert work.sync(db, settings, at=parked_at).closed == 1
    [item] = store.select(db, Selection(names=(f"step:{second}:1",), states=("closed",)))
    assert (item.closed_how, item.closed_note) == ("resolved", "suppressed: decided")
    assert store.select(db, Selection(kinds=("step",))) == []  # nothing waits
    # A late step whose task's action then failed every attempt: its dead letter takes over.
    late.park_step(db, watch_id=first, step_no=3, what="step 3", reason="late: clickup: 503",
                   settings=settings, at=parked_at)  # fmt: skip
    _dead_action(db, f"task:{first}:3", "task")
    synced = work.sync(db, settings, at=parked_at)
    assert (synced.new, synced.closed) == (1, 1)
    [dead] = store.select(db, Selection(kinds=("dead_action",)))
    [handed] = store.select(db, Selection(names=(f"step:{first}:3",), states=("closed",)))
    assert handed.closed_note == f"handed over to its dead letter #{dead.id}"
