"""The simulation's invariants on a small real world (``simulation/world.py``: a Postgres, the
sandbox over HTTP, the real jobs at a set clock): each holds on the world as the machine left it,
and fails, naming the record, when the data is broken on purpose.

One world for the module (its runs are made once, in the fixture); the first test checks it as
it is, the others each break one thing and put back what can be put back (a second ClickUp task,
mail, CRM Lead or credential stays: no vendor deletes it, and the tests assert only the
invariant they break)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.defs.alerts.checks import work_signals
from followup_pipeline.engine import work
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.settings import Settings
from followup_pipeline.simulation.invariants import Invariant, ReportWindow, check
from followup_pipeline.simulation.world import World
from followup_pipeline.store import alerts, lms, lms_content, watch_control
from followup_pipeline.store import work as work_store
from followup_pipeline.store.db import connection_kwargs

BERLIN, NEW_YORK = "academy-berlin", "academy-newyork"
OWNER = "owner@academy.example"


def utc(year: int, month: int, day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


#: Monday 2 March 2026, 08:00 in Berlin; the world ends on Monday 9 March, 15:00 in Berlin.
START, END = utc(2026, 3, 2, 7), utc(2026, 3, 9, 14)
WINDOWS = [
    ReportWindow("morning_report", "2026-03-02"),
    ReportWindow("weekly_report", "2026-03-06"),
    ReportWindow("morning_report", "2026-03-09"),
]


@dataclass
class Built:
    """The world after its runs, and what the tests need of it."""

    world: World
    conn: psycopg.Connection[Any]
    deals: list[str]
    watches: dict[str, int]
    #: The ledger key of each alert that went out.
    alert_keys: list[str]

    def check(self, settings: Settings | None = None, **kwargs: Any) -> dict[str, Invariant]:
        """Every invariant at the world's end, by name."""
        found = check(
            self.conn,
            self.world.control,
            settings or self.world.settings,
            end=kwargs.get("end", END),
            windows=kwargs.get("windows", WINDOWS),
        )
        return {invariant.name: invariant for invariant in found}

    def step(self, deal: int) -> str:
        """The ledger key of the first step of the ``deal``-th deal."""
        return f"task:{self.watches[self.deals[deal]]}:1"


def _academy(world: World, site: str, zone: str, closes: datetime, **values: Any) -> lms.Tenant:
    """A course with two learners and a quiz on the site (the second learner completed it), and
    the site's tenant, live; a course of the Berlin academy is certified by a group."""
    [course] = world.control("POST", f"/moodle/{site}/courses", {"fullname": "Onboarding"})[
        "courses"
    ]
    people = [
        {"firstname": f"Learner{n}", "lastname": "Test", "course": course["id"],
         "email": f"learner{n}@{site}.example"}
        for n in range(2)
    ]  # fmt: skip
    users = world.control("POST", f"/moodle/{site}/users", people)["users"]
    quiz = {"course": course["id"], "name": "Safety", "timeclose": int(closes.timestamp())}
    [made] = world.control("POST", f"/moodle/{site}/quizzes", quiz)["quizzes"]
    world.control("POST", f"/moodle/{site}/quizzes/{made['id']}/complete",
                  {"userid": users[1]["id"]})  # fmt: skip
    if site == BERLIN:
        values |= {"credential_token_ref": "ACADEMY_BERLIN_CREDENTIALS",
                   "credential_groups": {str(course["id"]): 9549}}  # fmt: skip
    return lms.Tenant(
        id=site,
        name=site,
        moodle_url=f"{world.sandbox_url}/moodle/{site}",
        token_ref=site.upper().replace("-", "_"),
        time_zone=zone,
        holiday_country="DE" if site == BERLIN else "US",
        sender="followup@example.com",
        course_ids=[course["id"]],
        mode="live",
        owner=OWNER,
        **values,
    )


def _build(world: World, conn: psycopg.Connection[Any]) -> Built:
    """Deals followed up for a week (one paused, one closed, one whose task fails every
    attempt), the reports, a dead letter alerted, leads, and two academies' reminders."""
    world.set_time(START)
    made = world.control(
        "POST",
        "/deals",
        {"emit_webhooks": False, "deals": [{"stage": "Proposal"} for _ in range(5)]},
    )
    deals = [deal["id"] for deal in made["deals"]]
    assert world.run("evaluate").success
    assert world.run("morning_report", partition="2026-03-02").success
    watches = {row["subject_id"]: row["id"] for row in conn.execute("SELECT * FROM watches")}
    with conn.transaction():  # the fourth deal's watch is paused before its step is due
        watch_control.pause_watch(conn, watch_id=watches[deals[3]], now=START + timedelta(days=2))
    # Leads: one person twice (one CRM Lead), a payment that is no lead, a paid checkout.
    world.control("POST", "/forms", {"name": "Ada Lovelace", "email": "ada@acme.example"})
    world.control("POST", "/forms", {"name": "Ada L.", "email": "ADA@acme.example"})
    world.control("POST", "/payments", {"type": "payment_intent.created", "email": "b@x.example"})
    world.control("POST", "/payments", {"email": "carol@beta.example", "name": "Carol"})
    assert world.run("lead_intake").success
    world.set_time(utc(2026, 3, 6, 14))
    assert world.run("weekly_report", partition="2026-03-06").success
    # Monday: the fifth deal was lost before the day's first run; the third's task fails.
    world.set_time(utc(2026, 3, 9, 5, 30))
    world.control("PATCH", f"/deals/{deals[4]}", {"stage": "Closed Lost"})
    fault = {"vendor": "clickup", "kind": "error", "status": 400, "method": "POST",
             "deal_id": deals[2]}  # fmt: skip
    world.control("POST", "/faults", fault)
    for hour in (6, 7):
        world.set_time(utc(2026, 3, 9, hour))
        assert world.run("evaluate").success
    world.control("DELETE", "/faults")
    assert world.run("morning_report", partition="2026-03-09").success
    now = utc(2026, 3, 9, 7, 5)
    work.sync(conn, world.settings, at=now)
    signals, _ = work_signals(work_store.to_alert(conn))
    limit, window = world.settings.alert_dead_letters_per_window, world.settings.alert_window()
    keys = alerts.record_dead_letters(conn, signals, at=now, limit=limit, window=window)
    config = {"ops": {"send_alerts": {"config": {"alert_keys": keys}}}}
    assert world.run("alert", config=config).success
    # The academies: Berlin by e-mail (one learner completed), New York in Moodle.
    berlin = _academy(world, BERLIN, "Europe/Berlin", utc(2026, 3, 11, 16))
    new_york = _academy(world, NEW_YORK, "America/New_York", utc(2026, 3, 11, 21),
                        channel="moodle")  # fmt: skip
    page = {"course": berlin.course_ids[0], "name": "Week 1"}
    [module] = world.control("POST", f"/moodle/{BERLIN}/modules", page)["modules"]
    with conn.transaction():
        lms.save_tenant(conn, berlin)
        lms.save_tenant(conn, new_york)
        version = lms_content.ContentVersion(BERLIN, "week-1", 1, "Week 1", berlin.course_ids[0],
                                             int(module["id"]), START)  # fmt: skip
        lms_content.save(conn, version)
        lms_content.approve(conn, BERLIN, "week-1", 1, by="an editor", at=START)
    for at in (utc(2026, 3, 9, 8, 30), END):
        world.set_time(at)
        assert world.run("lms_reminders").success
    assert world.run("evaluate").success
    return Built(world, conn, deals, watches, keys)


@pytest.fixture(scope="module")
def built(database_factory: Callable[..., str], template_name: str) -> Iterator[Built]:
    logging.getLogger("dagster").setLevel(logging.WARNING)
    url = database_factory(template_name)
    settings = {"FOLLOWUP_ACTION_MAX_ATTEMPTS": "2"}
    with (
        World(start=START, seed=3, database_url=url, settings=settings) as world,
        psycopg.connect(url, autocommit=True, **connection_kwargs()) as conn,
    ):
        yield _build(world, conn)


def test_every_invariant_holds_on_the_world_as_the_machine_left_it(built: Built) -> None:
    found = built.check()
    assert [(i.name, i.broken) for i in found.values() if not i.holds] == []
    assert all(invariant.checked > 0 for invariant in found.values()), found
    # What each looked at: the first steps due on Monday (two fired, one paused, one closed
    # with its deal, one a dead letter); the three windows' nine mails (each morning the
    # team's and three salespeople's, the week's one); four lead events.
    assert found["due steps ended once"].checked == 5
    assert found["reports sent once per window"].checked == 9
    assert found["lead events ended once"].checked == 4
    assert found["events settled"].checked == 4


def _mail_again(built: Built, key: str, to: str) -> None:
    """One more mail through Graph carrying the ledger key ``key``, as a second send would."""
    settings = built.world.settings
    secret = settings.graph_client_secret
    assert secret is not None
    graph = OutlookClient(str(settings.graph_login_url), str(settings.graph_url),
                          settings.graph_tenant_id, settings.graph_client_id,
                          secret.get_secret_value(), settings.graph_sender)  # fmt: skip
    try:
        graph.send_mail(to=[to], subject="again", html="<p>again</p>", key=key)
    finally:
        graph.close()


def _broken(found: dict[str, Invariant], name: str) -> str:
    invariant = found[name]
    assert not invariant.holds, invariant
    return "\n".join(invariant.broken)


def test_a_step_neither_fired_nor_skipped_breaks_due_steps(built: Built) -> None:
    key = built.step(0)
    watch, step = int(key.split(":")[1]), 1
    saved = built.conn.execute(
        "SELECT fired_at, task_ref, task_url FROM watch_steps WHERE watch_id = %s AND step_no = %s",
        (watch, step),
    ).fetchone()
    assert saved is not None
    update = (
        "UPDATE watch_steps SET fired_at = %s, task_ref = %s, task_url = %s"
        " WHERE watch_id = %s AND step_no = %s"
    )
    built.conn.execute(update, (None, None, None, watch, step))
    built.conn.execute("UPDATE actions SET outcome = 'failed' WHERE idempotency_key = %s", (key,))
    try:
        found = built.check()
    finally:
        built.conn.execute(
            update, (saved["fired_at"], saved["task_ref"], saved["task_url"], watch, step)
        )
        built.conn.execute(
            "UPDATE actions SET outcome = 'confirmed' WHERE idempotency_key = %s", (key,)
        )
    assert f"step {key} (due 2026-03-09): neither fired nor skipped (failed" in _broken(
        found, "due steps ended once"
    )
    # The task it made is still in ClickUp: a task the machine forgot.
    assert f"carries {key}, whose step records no task" in _broken(found, "one task per key")
    # And the account of due actions names it (``followup account``).
    assert f"deal_followup step {key} (due 2026-03-09" in _broken(
        found, "nothing unaccounted after its grace"
    )
    # A step not due yet is not looked at: a week earlier, nothing was due.
    assert built.check(end=START)["due steps ended once"].checked == 0


def test_a_dead_letter_without_an_owner_breaks_due_steps(built: Built) -> None:
    ownerless = built.world.settings.model_copy(update={"ops_owner": None})
    broken = _broken(built.check(ownerless), "due steps ended once")
    assert f"step {built.step(2)} (due 2026-03-09): a dead letter with no owner" in broken


def test_a_second_task_with_a_steps_key_breaks_one_task_per_key(built: Built) -> None:
    settings = built.world.settings
    token = settings.clickup_token
    assert token is not None
    client = ClickUpClient(str(settings.clickup_url), token.get_secret_value(),
                           settings.clickup_list_id)  # fmt: skip
    key = built.step(1)
    try:
        client.create_task(name="twin", markdown="", due_date=None, assignees=(),
                           idempotency_key=key)  # fmt: skip
    finally:
        client.close()
    found = built.check()
    assert f"{key} is on 2 tasks" in _broken(found, "one task per key")
    assert f"step {key} (due 2026-03-09): its key is on 2 tasks" in _broken(
        found, "due steps ended once"
    )


def test_an_event_left_pending_breaks_events_settled(built: Built) -> None:
    [row] = built.conn.execute("SELECT min(id) AS id FROM events").fetchall()
    event = row["id"]
    built.conn.execute("UPDATE events SET status = 'pending' WHERE id = %s", (event,))
    try:
        found = built.check()
    finally:
        built.conn.execute("UPDATE events SET status = 'done' WHERE id = %s", (event,))
    assert f"event:{event} (site-form): still pending" in _broken(found, "events settled")
    assert f"event:{event} (site-form): still pending" in _broken(found, "lead events ended once")
    # Unhandled is an end only for a source that has no handler.
    insert = (
        "INSERT INTO events (source, dedup_key, body, status) VALUES (%s, %s, '', 'unhandled')"
        " RETURNING id"
    )
    made = [built.conn.execute(insert, (source, source)).fetchone() for source in ("x", "payment")]
    try:
        broken = _broken(built.check(), "events settled")
    finally:
        built.conn.execute("DELETE FROM events WHERE id = ANY(%s)", ([r["id"] for r in made if r],))
    assert "(x)" not in broken
    assert "(payment): unhandled, though its source has a handler" in broken


def test_a_report_mailed_twice_or_never_breaks_reports(built: Built) -> None:
    key = "report:morning:2026-03-09"
    _mail_again(built, key, "sales-team@example.com")
    missing = ReportWindow("morning_report", "2026-03-10")
    found = built.check(windows=[*WINDOWS, missing])
    broken = _broken(found, "reports sent once per window")
    assert f"{key}: accepted, and 2 mails carry its key" in broken
    assert "report:morning:2026-03-10: neither sent nor skipped (no action" in broken


def test_alerts_beyond_their_limit_break_alerts(built: Built) -> None:
    assert built.alert_keys, "the dead letter was alerted"
    at = utc(2026, 3, 9, 8)
    fingerprint = "evaluate|StoreError|the database is gone"
    insert = (
        "INSERT INTO alerts (kind, source, fingerprint, subject, message, occurred_at, action_key)"
        " VALUES (%s, %s, %s, 'evaluate', 'failed', %s, %s) RETURNING id"
    )
    ids = [
        built.conn.execute(insert, ("run_failure", f"run:{n}", fingerprint,
                                    at + timedelta(hours=n), f"alert:run:x:{n}")).fetchone()
        for n in range(2)
    ]  # fmt: skip
    dead_key = "alert:dead:event:999@20260309T080000"
    dead = ("dead_letter", "event:999|x|y", "dead:event:999", at, dead_key)
    ids.append(built.conn.execute(insert, dead).fetchone())
    try:
        found = built.check()
        one_a_window = built.world.settings.model_copy(update={"alert_dead_letters_per_window": 1})
        limited = built.check(one_a_window)
    finally:
        built.conn.execute("DELETE FROM alerts WHERE id = ANY(%s)", ([r["id"] for r in ids if r],))
    broken = _broken(found, "alerts within their limits")
    assert f"{fingerprint}: alert:run:x:0 and alert:run:x:1 went out 1:00:00 apart" in broken
    assert "dead-letter alerts" not in broken  # two within the window: the limit is ten
    limited_broken = _broken(limited, "alerts within their limits")
    assert f"{dead_key}: 2 dead-letter alerts of their own" in limited_broken


def test_a_second_crm_lead_or_a_lost_one_breaks_the_leads(built: Built) -> None:
    settings = built.world.settings
    key = settings.espocrm_api_key
    assert key is not None
    answer = httpx.post(
        f"{settings.espocrm_url}/api/v1/Lead",
        json={"lastName": "Lovelace", "emailAddress": "Ada@Acme.example"},
        headers={"X-Api-Key": key.get_secret_value(), "X-Skip-Duplicate-Check": "true"},
        timeout=10,
    )
    answer.raise_for_status()
    [event] = built.conn.execute(
        "SELECT event_id FROM lead_events WHERE source = 'payment'"
    ).fetchall()
    step = f"{event['event_id']}:0:crm_upsert"
    saved = built.conn.execute("SELECT result FROM step_completions WHERE key = %s", (step,))
    kept = saved.fetchone()
    assert kept is not None
    built.conn.execute("UPDATE step_completions SET key = key || '-gone' WHERE key = %s", (step,))
    try:
        found = built.check()
    finally:
        built.conn.execute(
            "UPDATE step_completions SET key = %s WHERE key = %s", (step, f"{step}-gone")
        )
    assert "ada@acme.example: 2 CRM Leads" in _broken(found, "one CRM Lead per address")
    assert (
        f"event:{event['event_id']} (payment): done without a CRM Lead, a review item or a reason"
        in _broken(found, "lead events ended once")
    )


def test_a_reminder_left_unsent_or_sent_twice_breaks_the_reminders(built: Built) -> None:
    [row] = built.conn.execute(
        "SELECT idempotency_key FROM lms_reminders WHERE tenant_id = %s"
        " AND delivery_outcome = 'confirmed'",
        (BERLIN,),
    ).fetchall()
    key = row["idempotency_key"]
    update = "UPDATE lms_reminders SET delivery_outcome = %s WHERE idempotency_key = %s"
    built.conn.execute(update, ("failed", key))
    try:
        found = built.check()
    finally:
        built.conn.execute(update, ("confirmed", key))
    assert f"{key}: failed, not in the catch-up queue" in _broken(found, "reminders ended once")
    # Of the six records (in each academy the learner who completed the quiz has none: no run
    # plans a completed quiz), those due on Wednesday and the Monday after are not looked at.
    assert found["reminders ended once"].checked == 2
    _mail_again(built, key, "learner0@academy-berlin.example")
    assert f"{key}: on 2 messages" in _broken(built.check(), "reminders ended once")


def test_a_second_credential_or_a_second_publication_breaks_the_learning_side(
    built: Built,
) -> None:
    [cert] = built.conn.execute("SELECT * FROM lms_certificates").fetchall()
    learner = f"lms-cert:{BERLIN}:{cert['learner_id']}:{cert['course_id']}"
    twin = {"name": "Twin", "email": "twin@academy.example"}
    again = {"credential": {"recipient": twin, "group_id": cert["group_id"], "id": f"{learner}:2"}}
    token = built.world.sandbox_config.accredible_keys[BERLIN].get_secret_value()
    answer = httpx.post(f"{built.world.sandbox_url}/accredible/v1/credentials", json=again,
                        headers={"Authorization": f"Token token={token}"}, timeout=10)  # fmt: skip
    answer.raise_for_status()
    found = built.check()
    assert f"{learner}: 2 credentials" in _broken(found, "certificates issued once")
    [action] = built.conn.execute(
        "SELECT id FROM actions WHERE kind = 'publication' AND outcome = 'confirmed'"
    ).fetchall()
    insert = (
        "INSERT INTO action_attempts (action_id, attempt_no, started_at, outcome)"
        " VALUES (%s, 99, %s, 'accepted') RETURNING id"
    )
    attempt = built.conn.execute(insert, (action["id"], END)).fetchone()
    assert attempt is not None
    try:
        broken = _broken(built.check(), "content published once")
    finally:
        built.conn.execute("DELETE FROM action_attempts WHERE id = %s", (attempt["id"],))
    assert f"lms-publish:{BERLIN}:week-1:v1: published 2 times" in broken
