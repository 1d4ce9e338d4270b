"""Learning reminders inside Dagster on a real Postgres against the sandbox's two Moodle sites
and its Graph: a reminder due while the machine was down goes out once when it is back; a
completed quiz and an opted-out learner are suppressed with the reason; a lost answer is found
before a resend; 09:00 local in two zones on both sides of each DST change; after three days
down only the latest due reminder of an assignment goes out."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import dagster as dg
import httpx
import psycopg
import pytest

from followup_pipeline.defs import lms as capability
from followup_pipeline.integrations.resources import (
    AccredibleResource,
    MoodleResource,
    OutlookResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.settings import load_settings
from followup_pipeline.store import lms

from .lms_world import (
    BERLIN,
    NEW_YORK,
    SANDBOX,
    TOKENS,
    control,
    make_tenant,
    run_lms,
    seed_site,
    utc,
)


def _mails(sandbox: str) -> list[str]:
    """The recipient of each mail sent, in order."""
    messages = control(sandbox, "GET", "/outbox")["messages"]
    return [m["message"]["toRecipients"][0]["emailAddress"]["address"] for m in messages]


def _reminders(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return db.execute(
        "SELECT learner_id, action_type, local_day, delivery_outcome, reason FROM lms_reminders"
        " ORDER BY learner_id, due_at"
    ).fetchall()


def test_lms_a_reminder_due_while_the_machine_was_down_goes_out_once_when_it_is_back(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    # Due Wednesday 11 March 2026, 17:00 Berlin: the reminder two days before is Monday 09:00
    # (08:00 UTC). The machine is down from Monday 07:00 to 10:30 UTC (a deploy).
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16))
    make_tenant(db, sandbox, BERLIN, seeded["course"])
    assert run_lms(db_url, sandbox, utc(2026, 3, 9, 6, 45)).get(f"{BERLIN}:planned") == 6
    assert _mails(sandbox) == []  # 07:45 in Berlin: nothing due, and before business hours
    back = run_lms(db_url, sandbox, utc(2026, 3, 9, 10, 30))
    assert back[f"{BERLIN}:reminders_accepted"] == 2
    assert back[f"{BERLIN}:reminders_confirmed"] == 2  # read back from Sent Items
    assert sorted(_mails(sandbox)) == [
        f"learner0@{BERLIN}.example", f"learner1@{BERLIN}.example"
    ]  # fmt: skip
    # Later runs of the day send nothing more.
    run_lms(db_url, sandbox, utc(2026, 3, 9, 10, 45))
    run_lms(db_url, sandbox, utc(2026, 3, 9, 14, 0))
    assert len(_mails(sandbox)) == 2
    rows = _reminders(db)
    assert [r["delivery_outcome"] for r in rows if r["action_type"] == "before_due"] == [
        "confirmed", "confirmed"
    ]  # fmt: skip
    actions = db.execute(
        "SELECT outcome, provider_ref FROM actions WHERE kind = 'reminder'"
    ).fetchall()
    assert [a["outcome"] for a in actions] == ["confirmed", "confirmed"]
    last = db.execute("SELECT last_successful_action_at FROM lms_assignments").fetchall()
    assert all(r["last_successful_action_at"] == utc(2026, 3, 9, 10, 30) for r in last)


def test_lms_a_completed_quiz_and_an_opted_out_learner_are_suppressed_with_the_reason(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=3)
    make_tenant(db, sandbox, BERLIN, seeded["course"])
    run_lms(db_url, sandbox, utc(2026, 3, 6, 9))  # Friday: planned, nothing due
    done, out, open_ = seeded["users"]
    control(sandbox, "POST", f"/moodle/{BERLIN}/quizzes/{seeded['quiz']}/complete",
             {"userid": done})  # fmt: skip
    with db.transaction():
        lms.opt_out(db, BERLIN, out)
    counts = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 5))
    assert counts[f"{BERLIN}:suppressed_completed"] == 1
    assert counts[f"{BERLIN}:suppressed_opted_out"] == 1
    assert _mails(sandbox) == [f"learner2@{BERLIN}.example"]
    rows = {r["learner_id"]: r for r in _reminders(db) if r["action_type"] == "before_due"}
    assert (rows[done]["delivery_outcome"], rows[done]["reason"]) == ("suppressed", "completed")
    assert (rows[out]["delivery_outcome"], rows[out]["reason"]) == ("suppressed", "opted_out")
    assert rows[open_]["delivery_outcome"] == "confirmed"
    # The completed learner's later reminders are suppressed too when due, and no message
    # ever goes out (the one after the due date is still ahead).
    run_lms(db_url, sandbox, utc(2026, 3, 11, 8, 5))
    later = [(r["action_type"], r["reason"]) for r in _reminders(db) if r["learner_id"] == done]
    assert later == [("before_due", "completed"), ("due_day", "completed"), ("overdue", None)]
    assert f"learner0@{BERLIN}.example" not in _mails(sandbox)
    ledger = db.execute(
        "SELECT reason, count(*)::int AS n FROM actions WHERE kind = 'reminder'"
        " AND outcome = 'suppressed' GROUP BY reason ORDER BY reason"
    ).fetchall()
    assert {r["reason"] for r in ledger} >= {"completed", "opted_out"}


def test_lms_a_completed_quiz_gets_no_planned_reminder_from_any_run(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=2)
    make_tenant(db, sandbox, BERLIN, seeded["course"])
    done, open_ = seeded["users"]
    control(sandbox, "POST", f"/moodle/{BERLIN}/quizzes/{seeded['quiz']}/complete",
             {"userid": done})  # fmt: skip
    first = run_lms(db_url, sandbox, utc(2026, 3, 6, 9))  # the day's first run reads completions
    assert (first[f"{BERLIN}:planned"], first[f"{BERLIN}:completed_seen"]) == (3, 1)
    run_lms(db_url, sandbox, utc(2026, 3, 6, 9, 15))  # a quiet run: it reads none
    run_lms(db_url, sandbox, utc(2026, 3, 7, 9, 30))  # the next day's first run
    assert {r["learner_id"] for r in _reminders(db)} == {open_}
    assert len(_reminders(db)) == 3


def test_lms_a_course_listed_twice_is_synced_once(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=2)
    tenant = make_tenant(db, sandbox, BERLIN, seeded["course"])
    with db.transaction():
        lms.save_tenant(db, replace(tenant, course_ids=[seeded["course"], seeded["course"]]))
    first = run_lms(db_url, sandbox, utc(2026, 3, 6, 9))
    assert first[f"{BERLIN}:planned"] == 6  # two learners, three reminders each: once
    assert len(_reminders(db)) == 6


@pytest.mark.parametrize("channel", ["email", "moodle"])
def test_lms_a_crash_after_the_provider_accepted_sends_nothing_twice(
    db: psycopg.Connection[Any], db_url: str, sandbox: str, channel: str
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=1)
    make_tenant(db, sandbox, BERLIN, seeded["course"], channel=channel)
    run_lms(db_url, sandbox, utc(2026, 3, 6, 9))
    vendor = "graph" if channel == "email" else "moodle"
    control(sandbox, "POST", "/faults",
             {"vendor": vendor, "kind": "apply_then_error", "method": "POST", "count": 1,
              **({"path": "sendMail"} if channel == "email"
                 else {"function": "core_message_send_instant_messages"})})  # fmt: skip
    first = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 5))
    # Attempted (committed before the request), then unclear: the provider took it, the answer
    # said it failed.
    assert (first[f"{BERLIN}:reminders_attempted"], first[f"{BERLIN}:reminders_unknown"]) == (1, 1)
    [action] = db.execute("SELECT outcome, attempts FROM actions WHERE kind = 'reminder'")
    assert action == {"outcome": "unknown", "attempts": 1}
    second = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 20))
    assert second[f"{BERLIN}:reminders_accepted"] == 1  # found, not sent again
    if channel == "email":
        assert len(_mails(sandbox)) == 1
    else:
        sent = control(sandbox, "GET", f"/moodle/{BERLIN}/messages")["messages"]
        assert len(sent) == 1
    [row] = [r for r in _reminders(db) if r["action_type"] == "before_due"]
    assert row["delivery_outcome"] == "confirmed"


@pytest.mark.parametrize(
    ("site", "monday", "offset_before", "offset_after"),
    [
        # Berlin: 29 March (spring) and 25 October (autumn); New York: 8 March and 1 November.
        (BERLIN, date(2026, 3, 30), 1, 2),
        (BERLIN, date(2026, 10, 26), 2, 1),
        (NEW_YORK, date(2026, 3, 9), -5, -4),
        (NEW_YORK, date(2026, 11, 2), -4, -5),
    ],
)
def test_lms_two_zones_send_at_nine_local_on_both_sides_of_each_dst_change(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    site: str,
    monday: date,
    offset_before: int,
    offset_after: int,
) -> None:
    """The due-day reminder of a quiz due on the Monday after the change, and of one due on the
    Monday before it: each goes out in the run after 09:00 local, not in the run before."""
    for day, offset in ((monday - timedelta(days=7), offset_before), (monday, offset_after)):
        nine = datetime.combine(day, time(9), UTC) - timedelta(hours=offset)
        seeded = seed_site(sandbox, site, nine + timedelta(hours=8), learners=1)
        make_tenant(
            db,
            sandbox,
            site,
            seeded["course"],
            before_days=0,
            after_business_days=30,
            channel="moodle",
        )
        before = run_lms(db_url, sandbox, nine - timedelta(minutes=5))
        assert before.get(f"{site}:reminders_accepted", 0) == 0, (day, before)
        after = run_lms(db_url, sandbox, nine + timedelta(minutes=5))
        assert after[f"{site}:reminders_accepted"] == 1, (day, after)
        due = db.execute(
            "SELECT due_at, time_zone FROM lms_reminders WHERE action_type = 'due_day'"
            " AND local_day = %s",
            (day,),
        ).fetchone()
        assert due == {"due_at": nine, "time_zone": "Europe/Berlin" if site == BERLIN
                       else "America/New_York"}  # fmt: skip


def test_lms_after_three_days_down_each_assignment_gets_only_its_latest_due_reminder(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    # Due Wednesday 11 March, 22:00 Berlin: the reminders of Monday 9th and Wednesday 11th
    # 09:00 fall in the outage (Sunday 8th to Wednesday 11th, 11:00 Berlin).
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 21), learners=2)
    make_tenant(db, sandbox, BERLIN, seeded["course"])
    run_lms(db_url, sandbox, utc(2026, 3, 8, 9))
    back = run_lms(db_url, sandbox, utc(2026, 3, 11, 10))
    assert back[f"{BERLIN}:suppressed_superseded"] == 2
    assert back[f"{BERLIN}:reminders_accepted"] == 2
    assert len(_mails(sandbox)) == 2
    rows = _reminders(db)
    by_type = {(r["learner_id"], r["action_type"]): r for r in rows}
    for learner in seeded["users"]:
        assert by_type[(learner, "before_due")]["reason"] == "superseded"
        assert by_type[(learner, "due_day")]["delivery_outcome"] == "confirmed"
        assert by_type[(learner, "overdue")]["delivery_outcome"] == "planned"  # still ahead


def test_lms_cli_sets_a_tenant_refuses_what_is_wrong_and_metrics_show_each_tenant(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from followup_pipeline.cli import main

    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_LMS_TOKENS", json.dumps(TOKENS))
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=1)
    assert main(["lms", "tenant", "set", BERLIN, "--name", "Academy"]) == 2
    assert "a new tenant needs --moodle-url, --token-ref, --zone" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["lms", "tenant", "set", BERLIN, "--zone", "Mars/Olympus"])
    assert "not a time zone: 'Mars/Olympus'" in capsys.readouterr().err
    args = ["lms", "tenant", "set", BERLIN, "--name", "Academy", "--moodle-url",
            f"{sandbox}/moodle/{BERLIN}", "--token-ref", "ACADEMY_BERLIN", "--zone",
            "Europe/Berlin", "--courses", str(seeded["course"])]  # fmt: skip
    assert main(args) == 2  # e-mail, the default channel, needs a sender
    assert main([*args, "--sender", "followup@example.com"]) == 0
    assert "tenant academy-berlin saved: dry, Europe/Berlin, email" in capsys.readouterr().out
    # A new tenant is dry: every reminder recorded, none sent.
    counts = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 5))
    assert counts[f"{BERLIN}:suppressed_dry_run"] == 1
    assert _mails(sandbox) == []
    assert main(["lms", "tenants"]) == 0
    listed = capsys.readouterr().out
    assert "academy-berlin: dry, Europe/Berlin, email from followup@example.com" in listed
    assert "(ACADEMY_BERLIN: token set)" in listed
    assert main(["lms", "opt-out", "nowhere", "7"]) == 2
    assert "no tenant 'nowhere'" in capsys.readouterr().out
    assert main(["lms", "status"]) == 0
    status = capsys.readouterr().out.splitlines()
    # By the real clock (months later), the due day's and the overdue reminder were never run.
    assert status[2].split()[:4] == [BERLIN, "dry", "Europe/Berlin", "2"]
    # /metrics: each tenant's reminders by state.
    from followup_pipeline.ingress.app import create_app
    from followup_pipeline_tests.ingress.conftest import ingress_settings
    from followup_pipeline_tests.support import served

    with served(create_app(ingress_settings(), db_url)) as base:
        metrics = httpx.get(f"{base}/metrics", timeout=15).text
    assert f'followup_lms_reminders{{tenant="{BERLIN}",state="overdue"}} 2' in metrics
    assert f'followup_lms_reminders{{tenant="{BERLIN}",state="sent"}} 0' in metrics


def test_lms_the_academys_owner_gets_the_week_once(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=2)
    make_tenant(db, sandbox, BERLIN, seeded["course"], owner="owner@example.com",
            backup="backup@example.com")  # fmt: skip
    run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 5))  # two reminders sent
    resources = {
        "postgres": PostgresResource(url=db_url),
        "clock": ClockResource(start=utc(2026, 3, 16, 6).isoformat(), ticking=False),
        "moodle": MoodleResource(tokens=json.dumps(TOKENS)),
        "accredible": AccredibleResource(base_url=f"{sandbox}/accredible"),
        "outlook": OutlookResource(
            login_url=f"{sandbox}/login",
            graph_url=f"{sandbox}/graph",
            tenant_id=SANDBOX.graph_tenant_id,
            client_id=SANDBOX.graph_client_id,
            client_secret=SANDBOX.graph_client_secret.get_secret_value(),
            sender="followup@example.com",
        ),
    }
    built = capability.build_defs(load_settings())
    job = dg.Definitions.merge(built, dg.Definitions(resources=resources)).resolve_job_def(
        "lms_weekly"
    )
    with dg.instance_for_test() as instance:
        first = job.execute_in_process(instance=instance).output_for_node("mail_academy_owners")
        again = job.execute_in_process(instance=instance).output_for_node("mail_academy_owners")
    assert (first.get("sent"), again.get("already_sent")) == (1, 1)
    messages = control(sandbox, "GET", "/outbox")["messages"]
    weekly = [m["message"] for m in messages if "week 2026-W12" in m["message"]["subject"]]
    assert len(weekly) == 1
    to = [r["emailAddress"]["address"] for r in weekly[0]["toRecipients"]]
    assert to == ["owner@example.com", "backup@example.com"]
    assert weekly[0]["subject"].startswith(
        f"Learning reminders of {BERLIN}, week 2026-W12: 2 sent"
    )  # in the academy's language (English by default), from its template
    assert "Delivery confirmed: 2" in weekly[0]["textBody"]
    assert "followup lms" not in weekly[0]["textBody"]  # no command for an academy's owner


def test_lms_a_send_that_failed_is_checked_again_before_the_retry(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    """A send whose answer was an error that did not apply: read back (not there), then the
    re-check finds the learner opted out since; nothing goes out."""
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=1)
    make_tenant(db, sandbox, BERLIN, seeded["course"], channel="moodle")
    run_lms(db_url, sandbox, utc(2026, 3, 6, 9))
    control(sandbox, "POST", "/faults",
             {"vendor": "moodle", "kind": "error", "status": 503, "count": 1,
              "function": "core_message_send_instant_messages"})  # fmt: skip
    first = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 5))
    assert first[f"{BERLIN}:reminders_unknown"] == 1  # a 5xx to a send: maybe sent
    with db.transaction():
        lms.opt_out(db, BERLIN, seeded["users"][0])
    second = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 20))
    assert second[f"{BERLIN}:suppressed_opted_out"] == 1
    assert control(sandbox, "GET", f"/moodle/{BERLIN}/messages")["messages"] == []


def test_lms_a_refused_message_fails_and_a_closed_quiz_is_not_reminded_as_due(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    # The quiz closes Saturday 14 March at 12:00: the due day's reminder would go out on Monday
    # (no business hours on Saturday), after it closed: it is superseded by the overdue one.
    course = control(sandbox, "POST", f"/moodle/{BERLIN}/courses", {"fullname": "C"})["courses"]
    people = [{"firstname": "Open", "lastname": "L", "course": course[0]["id"],
               "email": "open@example.com"},
              {"firstname": "Closed", "lastname": "L", "course": course[0]["id"],
               "email": "closed@example.com", "messaging": "onlycontacts"}]  # fmt: skip
    users = control(sandbox, "POST", f"/moodle/{BERLIN}/users", people)["users"]
    quiz = {"course": course[0]["id"], "name": "Q", "timeclose": "2026-03-14T11:00:00Z"}
    control(sandbox, "POST", f"/moodle/{BERLIN}/quizzes", quiz)
    make_tenant(db, sandbox, BERLIN, course[0]["id"], channel="moodle")
    run_lms(db_url, sandbox, utc(2026, 3, 11, 9))  # Wednesday: nothing due yet
    thursday = run_lms(db_url, sandbox, utc(2026, 3, 12, 8, 5))  # two days before
    assert (thursday[f"{BERLIN}:reminders_confirmed"], thursday[f"{BERLIN}:reminders_failed"]) == (
        1, 1
    )  # fmt: skip
    refused = db.execute(
        "SELECT outcome, last_error FROM actions WHERE idempotency_key LIKE %s",
        (f"lms:{BERLIN}:{users[1]['id']}:%",),
    ).fetchone()
    assert refused is not None
    assert refused["outcome"] == "failed"
    assert "refused" in refused["last_error"]
    monday = run_lms(db_url, sandbox, utc(2026, 3, 16, 8, 5))
    assert monday[f"{BERLIN}:suppressed_superseded"] >= 1
    rows = {(r["learner_id"], r["action_type"]): r for r in _reminders(db)}
    assert rows[(users[0]["id"], "due_day")]["reason"] == "superseded"
    messages = control(sandbox, "GET", f"/moodle/{BERLIN}/messages")["messages"]
    assert len(messages) == 1  # the reminder two days before, to the one who accepts messages


def test_lms_a_learner_no_longer_enrolled_is_not_reminded_and_one_run_at_a_time_sends(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    from followup_pipeline.store.run_lock import RunLock

    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=2)
    make_tenant(db, sandbox, BERLIN, seeded["course"])
    run_lms(db_url, sandbox, utc(2026, 3, 6, 9))
    gone, stays = seeded["users"]
    control(sandbox, "POST", f"/moodle/{BERLIN}/enrolments",
             {"userid": gone, "courseid": seeded["course"], "active": False})  # fmt: skip
    # Another run holds the remaining learner's reminder: this one leaves it alone.
    key = f"lms:{BERLIN}:{stays}:{seeded['quiz']}:before_due:2026-03-09"
    held = RunLock.try_take(db_url, f"reminder:{key}", owner="the other run")
    try:
        first = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 5))
    finally:
        held.release()
    assert first[f"{BERLIN}:in_flight"] == 1
    assert _mails(sandbox) == []
    reasons = {r["reason"] for r in _reminders(db) if r["learner_id"] == gone}
    assert reasons == {"unassigned"}
    again = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 20))
    assert again[f"{BERLIN}:reminders_confirmed"] == 1
    assert _mails(sandbox) == [f"learner1@{BERLIN}.example"]


def test_lms_a_run_killed_after_graph_took_the_mail_and_before_its_commit_sends_nothing_twice(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    """The state a killed run leaves: the action committed ``attempted`` and the mail, with the
    key it carried, in the mailbox. The next run finds it there and sends nothing."""
    from followup_pipeline.integrations.outlook import OutlookClient

    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=1)
    make_tenant(db, sandbox, BERLIN, seeded["course"])
    run_lms(db_url, sandbox, utc(2026, 3, 6, 9))
    key = f"lms:{BERLIN}:{seeded['users'][0]}:{seeded['quiz']}:before_due:2026-03-09"
    db.execute(
        "INSERT INTO actions (idempotency_key, kind, due_at, time_zone, outcome, attempts)"
        " VALUES (%s, 'reminder', %s, 'Europe/Berlin', 'attempted', 1)",
        (key, utc(2026, 3, 9, 8)),
    )
    graph = OutlookClient(
        f"{sandbox}/login", f"{sandbox}/graph", SANDBOX.graph_tenant_id, SANDBOX.graph_client_id,
        SANDBOX.graph_client_secret.get_secret_value(), "followup@example.com",
    )  # fmt: skip
    try:
        graph.send_mail(to=[f"learner0@{BERLIN}.example"], subject="Reminder", html="<p>x</p>",
                        key=key)  # fmt: skip
    finally:
        graph.close()
    counts = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 20))
    assert counts[f"{BERLIN}:reminders_accepted"] == 1
    assert counts[f"{BERLIN}:reminders_confirmed"] == 1
    assert len(_mails(sandbox)) == 1  # the killed run's, and no other
    action = db.execute(
        "SELECT outcome, attempts, last_error FROM actions WHERE idempotency_key = %s", (key,)
    ).fetchone()
    assert action is not None
    assert action["outcome"] == "confirmed"
    assert action["last_error"] == "found by read-back"


def test_lms_a_moodle_away_for_eight_days_parks_what_is_late_and_expires_it_in_sight(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from followup_pipeline.cli import main

    # Three quizzes of one course, closing before, early in and late in the outage.
    seeded = seed_site(sandbox, BERLIN, utc(2026, 2, 26, 21), learners=1)
    course = seeded["course"]
    for name, closes in (("Quiz B", utc(2026, 3, 12, 21)), ("Quiz C", utc(2026, 3, 4, 21))):
        quiz = {"course": course, "name": name, "timeclose": int(closes.timestamp())}
        control(sandbox, "POST", f"/moodle/{BERLIN}/quizzes", quiz)
    make_tenant(db, sandbox, BERLIN, course, owner="owner@academy.example")
    away = utc(2026, 3, 2, 10, 30)
    run_lms(db_url, sandbox, away)  # Moodle answers: plans, and sends what is due
    control(sandbox, "POST", "/faults", {"vendor": "moodle", "kind": "error", "status": 503})
    for day in (3, 5, 9):  # runs at 11:30 in Berlin, Moodle away
        assert run_lms(db_url, sandbox, utc(2026, 3, day, 10, 30))[f"{BERLIN}:unreachable"] == 1
    parked = {
        row["action_key"]: row["opened_at"]
        for row in db.execute(
            "SELECT action_key, opened_at FROM work_items WHERE kind = 'reminder'"
        )
    }
    # Meanwhile `lms status` names the academy whose Moodle is away, and fails.
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_NOW", utc(2026, 3, 9, 10, 35).isoformat())
    capsys.readouterr()
    assert main(["lms", "status"]) == 1
    said = capsys.readouterr().out
    assert f"{BERLIN}: Moodle UNREACHABLE since 2026-03-03 11:30 CET (moodle: HTTP 503" in said
    assert "last reached 2026-03-02 11:30 CET" in said
    control(sandbox, "DELETE", "/faults")
    back = utc(2026, 3, 11, 10, 30)  # eight days later
    # What is still worth sending goes out paced: here one a run, the other a quarter later.
    assert run_lms(db_url, sandbox, back, lms_sends_per_run=1)[f"{BERLIN}:paced"] == 1
    assert len(_mails(sandbox)) == 2  # one before the outage, one now
    assert f"{BERLIN}:paced" not in run_lms(db_url, sandbox, back + timedelta(minutes=15))

    rows = db.execute(
        "SELECT idempotency_key AS key, assignment_id, due_at, delivery_outcome, reason,"
        " settled_at FROM lms_reminders WHERE due_at > %s AND due_at <= %s ORDER BY due_at",
        (away, back),
    ).fetchall()
    latest = {row["assignment_id"]: row for row in rows}  # the latest due of each quiz
    ended: dict[str, list[str]] = {"confirmed": [], "expired": []}
    for row in rows:
        if row is latest[row["assignment_id"]] and back - row["due_at"] <= timedelta(days=7):
            assert row["delivery_outcome"] == "confirmed", row
            ended["confirmed"].append(row["key"])
            continue
        assert (row["delivery_outcome"], row["reason"]) in (
            ("suppressed", "superseded"), ("suppressed", "expired")
        ), row  # fmt: skip
        if row["reason"] == "expired":
            ended["expired"].append(row["key"])
            # It was on the owner's list before it expired, and closed as expired.
            assert parked[row["key"]] < row["settled_at"], row
    assert len(ended["confirmed"]) == 2, ended
    assert len(ended["expired"]) == 1, ended
    closed = db.execute(
        "SELECT owner, state, closed_how, reason FROM work_items WHERE action_key = %s",
        (ended["expired"][0],),
    ).fetchone()
    assert closed is not None
    assert (closed["owner"], closed["state"], closed["closed_how"]) == (
        "owner@academy.example", "closed", "expired"
    )  # fmt: skip
    assert "late: the tenant cannot be reached (moodle: HTTP 503" in closed["reason"]

    # Nothing unaccounted; lms status and /metrics count the expired one.
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_NOW", (back + timedelta(minutes=5)).isoformat())
    capsys.readouterr()
    assert main(["account", "--since", away.isoformat(), "--pipeline", "learning"]) == 0
    assert "unaccounted: 0" in capsys.readouterr().out
    assert main(["lms", "status"]) == 0
    status = capsys.readouterr().out.splitlines()
    assert f"{BERLIN}: Moodle last reached 2026-03-11 11:45 CET" in status, status
    assert status[1].split()[9] == "expired", status  # ("opted out" is two words)
    assert status[2].split()[8] == "1", status
    from followup_pipeline.ingress.app import create_app
    from followup_pipeline_tests.ingress.conftest import ingress_settings
    from followup_pipeline_tests.support import served

    clock = (back + timedelta(minutes=5)).timestamp()
    with served(create_app(ingress_settings(), db_url, now=lambda: clock)) as base:
        metrics = httpx.get(f"{base}/metrics", timeout=15).text
    assert f'followup_lms_reminders{{tenant="{BERLIN}",state="expired"}} 1' in metrics
    assert "followup_account_unaccounted 0" in metrics
    # Its last 7 days hold the two sent after the outage.
    assert 'followup_account{pipeline="learning",kind="reminder",ending="done"} 2' in metrics
