"""Certificates and content publishing inside Dagster on a real Postgres against the sandbox's
Moodle and Accredible: a learner who completed a course gets one export, confirmed by read-back;
a second run exports nothing more; an export the platform lost is found missing and issued again;
a lost answer is found by the read-back, never issued twice. Approved current content due
yesterday is published once; a superseded version never; content not approved waits, says why,
and is queued with the tenant's owner (alerted to them) until it is approved and published. A
certificate or content late while the tenant cannot be reached waits with the owner too."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.defs.alerts.checks import work_signals
from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.domain.work import Selection
from followup_pipeline.engine import work
from followup_pipeline.integrations.errors import TransientError
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import load_settings
from followup_pipeline.store import alerts as alert_store
from followup_pipeline.store import lms, lms_content
from followup_pipeline.store import lms_certificates as certs
from followup_pipeline.store import work as work_store
from followup_pipeline.store.alerts import Signal
from followup_pipeline.store.lms_content import content_lock
from followup_pipeline.store.run_lock import RunLock
from followup_pipeline.store.work import WorkItem

from .lms_world import BERLIN, TOKENS, control, make_tenant, run_lms, seed_site, utc

OWNER, BACKUP = "owner@academy-berlin.example", "backup@academy-berlin.example"
#: Monday 2 March 2026, 10:00 in Berlin: no reminder of the seeded quiz is due yet.
MONDAY = utc(2026, 3, 2, 9)


def _items(db: psycopg.Connection[Any], *states: str) -> list[WorkItem]:
    """The learning reminders' items of the work list (default: the waiting ones)."""
    chosen = states or ("open", "acknowledged")
    return work_store.select(db, Selection(pipeline="learning", states=chosen))


def _signals(db: psycopg.Connection[Any], **settings: Any) -> tuple[list[Signal], list[Signal]]:
    """What the alert checks raise now: dead letters, and the learning items."""
    work.sync(db, load_settings(**settings), at=MONDAY)
    return work_signals(work_store.to_alert(db))


def _certifying(db: psycopg.Connection[Any], sandbox: str, learners: int = 2) -> dict[str, Any]:
    """A course of the Berlin academy certified by Accredible's group 9549, its tenant live."""
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=learners)
    make_tenant(
        db, sandbox, BERLIN, seeded["course"],
        credential_token_ref="ACADEMY_BERLIN_CREDENTIALS",
        credential_groups={str(seeded["course"]): 9549},
        owner=OWNER, backup=BACKUP,
    )  # fmt: skip
    return seeded


def _complete(sandbox: str, seeded: dict[str, Any], user: int) -> None:
    control(sandbox, "POST", f"/moodle/{BERLIN}/quizzes/{seeded['quiz']}/complete",
            {"userid": user})  # fmt: skip


def _credentials(sandbox: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = control(sandbox, "GET", "/accredible/credentials")["credentials"]
    return listed


def _certify(db_url: str, sandbox: str, at: datetime) -> dict[str, Any]:
    return run_lms(db_url, sandbox, at, node="reconcile_certificates")


def test_lms_a_completed_course_gets_one_export_confirmed_and_a_lost_one_is_issued_again(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    seeded = _certifying(db, sandbox)
    done, not_done = seeded["users"]
    _complete(sandbox, seeded, done)
    first = _certify(db_url, sandbox, MONDAY)
    assert first[f"{BERLIN}:issued"] == 1
    assert first[f"{BERLIN}:confirmed"] == 1
    [credential] = _credentials(sandbox)
    key = f"lms-cert:{BERLIN}:{done}:{seeded['course']}:1"
    assert credential["recipient_email"] == f"learner0@{BERLIN}.example"
    assert credential["license_id"] == key
    assert credential["group_id"] == 9549
    # Within the hour nothing is asked again; an hour later the platform is read: it holds it.
    soon = _certify(db_url, sandbox, MONDAY + timedelta(minutes=15))
    assert soon[f"{BERLIN}:checked_lately"] == 1
    again = _certify(db_url, sandbox, MONDAY + timedelta(hours=1))
    assert again.get(f"{BERLIN}:issued", 0) == 0
    assert again[f"{BERLIN}:held"] == 1
    assert len(_credentials(sandbox)) == 1
    # The platform loses it: found missing at the next read-back, and issued again once.
    control(sandbox, "DELETE", f"/accredible/credentials/{credential['id']}")
    third = _certify(db_url, sandbox, MONDAY + timedelta(hours=2))
    assert third[f"{BERLIN}:lost_issued_again"] == 1
    assert third[f"{BERLIN}:issued"] == 1
    [reissued] = _credentials(sandbox)
    assert reissued["license_id"] == f"lms-cert:{BERLIN}:{done}:{seeded['course']}:2"
    row = db.execute(
        "SELECT generation, state, lost_at, credential_id FROM lms_certificates"
    ).fetchall()
    assert len(row) == 1  # the learner who did not complete has none
    assert row[0]["generation"] == 2
    assert row[0]["state"] == "confirmed"
    assert row[0]["lost_at"] is not None
    assert row[0]["credential_id"] == reissued["id"]
    actions = db.execute(
        "SELECT idempotency_key, outcome, attempts FROM actions WHERE kind = 'certificate'"
        " ORDER BY idempotency_key"
    ).fetchall()
    assert [(a["outcome"], a["attempts"]) for a in actions] == [("confirmed", 1), ("confirmed", 1)]
    assert not_done not in {r["learner_id"] for r in db.execute("SELECT * FROM lms_certificates")}
    # Moodle cannot report the course's completion any more: what was recorded is still settled.
    control(sandbox, "PATCH", f"/moodle/{BERLIN}/courses/{seeded['course']}",
            {"enablecompletion": False})  # fmt: skip
    fourth = _certify(db_url, sandbox, MONDAY + timedelta(hours=3))
    assert fourth[f"{BERLIN}:completions_unreadable"] == 1
    assert fourth[f"{BERLIN}:held"] == 1


@pytest.mark.parametrize("kind", ["drop_answer", "apply_then_error"])
def test_lms_an_export_whose_answer_was_lost_is_found_and_never_issued_twice(
    db: psycopg.Connection[Any], db_url: str, sandbox: str, kind: str
) -> None:
    seeded = _certifying(db, sandbox, learners=1)
    _complete(sandbox, seeded, seeded["users"][0])
    control(sandbox, "POST", "/faults",
            {"vendor": "accredible", "kind": kind, "method": "POST",
             "path": "/v1/credentials", "count": 1})  # fmt: skip
    first = _certify(db_url, sandbox, MONDAY)
    assert first[f"{BERLIN}:issue_failed"] == 1
    assert len(_credentials(sandbox)) == 1  # the platform made it; its answer was lost
    second = _certify(db_url, sandbox, MONDAY + timedelta(hours=1))
    assert second[f"{BERLIN}:confirmed"] == 1
    assert second.get(f"{BERLIN}:issued", 0) == 0
    assert len(_credentials(sandbox)) == 1
    action = db.execute(
        "SELECT outcome, last_error FROM actions WHERE kind = 'certificate'"
    ).fetchone()
    assert action is not None
    assert action["outcome"] == "confirmed"
    assert action["last_error"] == "found by read-back"


def test_lms_a_learner_without_an_address_is_queued_with_the_owner_and_alerted_to_them(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seeded = _certifying(db, sandbox, learners=1)
    [nobody] = control(sandbox, "POST", f"/moodle/{BERLIN}/users",
                       [{"firstname": "No", "lastname": "Address", "email": None,
                         "course": seeded["course"]}])["users"]  # fmt: skip
    _complete(sandbox, seeded, nobody["id"])
    counts = _certify(db_url, sandbox, MONDAY)
    assert counts[f"{BERLIN}:queued"] == 1
    assert _credentials(sandbox) == []
    [item] = _items(db)
    assert (item.owner, item.backup, item.kind) == (OWNER, BACKUP, "certificate")
    assert "no e-mail address" in item.reason
    # Queued once: the next run finds it there.
    later = _certify(db_url, sandbox, MONDAY + timedelta(hours=1))
    assert later[f"{BERLIN}:queued_before"] == 1
    assert len(_items(db)) == 1
    # The alert checks raise it once, to the operations list (the owner and backup get a mail
    # of their own with it: defs/lms/test_links.py).
    [signal] = _signals(db)[1]
    recorded = alert_store.record(db, signal, window=None)
    assert recorded is not None
    assert recorded.key is not None
    assert alert_store.also_to(db, recorded.key) == []
    assert alert_store.record(db, signal, window=None) is None  # its source recorded once
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    assert main(["lms", "queue"]) == 0
    shown = capsys.readouterr().out
    assert f"owner {OWNER} (backup {BACKUP})" in shown
    assert "no e-mail address" in shown
    assert shown.rstrip().endswith("1 open")


def _module(sandbox: str, course: int, name: str) -> int:
    [made] = control(sandbox, "POST", f"/moodle/{BERLIN}/modules",
                     {"course": course, "name": name})["modules"]  # fmt: skip
    return int(made["id"])


def _visible(sandbox: str, cmid: int) -> int:
    world = control(sandbox, "GET", f"/moodle/{BERLIN}")
    return int(next(m for m in world["modules"] if m["id"] == cmid)["visible"])


def _publish(db_url: str, sandbox: str, at: datetime) -> dict[str, Any]:
    return run_lms(db_url, sandbox, at, node="publish_content")


def test_lms_approved_current_content_is_published_once_and_an_outdated_version_never(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=1)
    course = seeded["course"]
    make_tenant(db, sandbox, BERLIN, course, owner=OWNER, backup=BACKUP)
    week2, week1_v1, week1_v2 = (_module(sandbox, course, n) for n in ("W2", "W1 v1", "W1 v2"))
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_LMS_TOKENS", json.dumps(TOKENS))
    yesterday = "2026-03-01T09:00"  # Berlin time; the run is on Monday 2 March
    for content, version, cmid in (("week-2", 1, week2), ("week-1", 1, week1_v1)):
        assert main(["lms", "content", "add", BERLIN, content, "--version", str(version),
                     "--title", content, "--course", str(course), "--cmid", str(cmid),
                     "--publish-at", yesterday]) == 0  # fmt: skip
        assert main(["lms", "content", "approve", BERLIN, content, str(version),
                     "--by", "Dana Editor"]) == 0  # fmt: skip
    # A second version of week 1 arrives, not approved yet: version 1 is outdated now.
    assert main(["lms", "content", "add", BERLIN, "week-1", "--version", "2", "--title", "W1",
                 "--course", str(course), "--cmid", str(week1_v2),
                 "--publish-at", yesterday]) == 0  # fmt: skip
    first = _publish(db_url, sandbox, MONDAY)
    assert first[f"{BERLIN}:published"] == 1
    assert first[f"{BERLIN}:confirmed"] == 1
    assert first[f"{BERLIN}:superseded"] == 1
    assert first[f"{BERLIN}:waiting_approval"] == 1
    assert (_visible(sandbox, week2), _visible(sandbox, week1_v1)) == (1, 0)
    assert _visible(sandbox, week1_v2) == 0
    [queued] = _items(db)
    assert queued.kind == "publication"
    assert queued.owner == OWNER
    assert "not approved" in queued.reason
    capsys.readouterr()
    assert main(["lms", "content", "list", BERLIN]) == 0
    listed = capsys.readouterr().out
    assert "week-1 v1 (week-1): superseded" in listed
    assert "never published" in listed
    assert "week-1 v2 (W1): waiting, not approved" in listed
    # While a run publishes week 1 (it holds the content's lock), no version is added to it.
    held = RunLock.try_take(db_url, content_lock(BERLIN, "week-1"), owner="a run")
    try:
        third = ["--version", "3", "--title", "W", "--course", str(course), "--cmid", "1"]
        added = main(["lms", "content", "add", BERLIN, "week-1", *third, "--publish-at", yesterday])
        assert added == 1
    finally:
        held.release()
    assert "a run is publishing week-1" in capsys.readouterr().out
    # The outdated version cannot be approved any more; the new one is, and goes out.
    assert main(["lms", "content", "approve", BERLIN, "week-1", "1", "--by", "Dana"]) == 2
    assert main(["lms", "content", "approve", BERLIN, "week-1", "2", "--by", "Dana"]) == 0
    second = _publish(db_url, sandbox, MONDAY + timedelta(minutes=15))
    assert second[f"{BERLIN}:published"] == 1
    assert (_visible(sandbox, week1_v1), _visible(sandbox, week1_v2)) == (0, 1)
    assert _items(db) == []
    [closed] = _items(db, "closed")
    assert (closed.closed_how, closed.closed_note) == ("resolved", "published and read back")
    # Nothing is published twice: one attempt per published version, none for the outdated.
    actions = db.execute(
        "SELECT idempotency_key, outcome, attempts, reason FROM actions"
        " WHERE kind = 'publication' ORDER BY idempotency_key"
    ).fetchall()
    assert [(a["idempotency_key"], a["outcome"], a["attempts"]) for a in actions] == [
        (f"lms-publish:{BERLIN}:week-1:v1", "suppressed", 0),
        (f"lms-publish:{BERLIN}:week-1:v2", "confirmed", 1),
        (f"lms-publish:{BERLIN}:week-2:v1", "confirmed", 1),
    ]
    third = _publish(db_url, sandbox, MONDAY + timedelta(minutes=30))
    assert not any(name.endswith(":published") for name in third)


def test_lms_a_reminder_that_failed_every_attempt_waits_with_its_owner_until_it_is_settled(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=0)
    [nobody] = control(sandbox, "POST", f"/moodle/{BERLIN}/users",
                       [{"firstname": "No", "lastname": "Address", "email": None,
                         "course": seeded["course"]}])["users"]  # fmt: skip
    make_tenant(db, sandbox, BERLIN, seeded["course"], owner=OWNER, backup=BACKUP)
    once = {"action_max_attempts": 1}
    first = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 5), **once)  # Monday: before the due day
    assert first[f"{BERLIN}:reminders_failed"] == 1  # no address: a failed attempt, no request
    second = run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 20), **once)
    assert second[f"{BERLIN}:queued"] == 1
    [item] = _items(db)
    assert (item.kind, item.owner, item.backup) == ("reminder", OWNER, BACKUP)
    assert "no e-mail address" in item.reason
    assert f"followup dead-letters replay action:{item.action_key}" in item.reason
    # One item, alerted once as a catch-up item to the owner, not a second time as a dead
    # letter (its dead action is the same item).
    dead, catch_up = _signals(db, **once)
    assert ([s.fingerprint for s in catch_up], dead) == ([f"queue:{BERLIN}:reminder"], [])
    assert [(i.id, i.failures) for i in _items(db)] == [(item.id, 1)]
    # The learner completes the quiz: the next day's sync sees it, and the item closes.
    control(sandbox, "POST", f"/moodle/{BERLIN}/quizzes/{seeded['quiz']}/complete",
            {"userid": nobody["id"]})  # fmt: skip
    run_lms(db_url, sandbox, utc(2026, 3, 10, 8, 5), **once)
    assert _items(db) == []
    [closed] = _items(db, "closed")
    assert (closed.closed_how, closed.closed_note) == ("resolved", "suppressed: completed")


def test_lms_late_certificates_and_content_of_an_unreachable_tenant_wait_with_its_owner(
    db: psycopg.Connection[Any], sandbox: str, db_url: str
) -> None:
    """Late means owned, for what a run could not reach: a completion older than its grace (3 h)
    and content due longer ago than its (1 h) go on the owner's list, once, saying why."""
    seeded = _certifying(db, sandbox, learners=2)
    learner, newer = seeded["users"]
    for who, hours in ((learner, 4), (newer, 2)):  # the second is within its grace
        completed = MONDAY - timedelta(hours=hours)
        certs.seen(db, certs.Completion(BERLIN, who, seeded["course"], 9549, f"L{who}", None,
                                        completed), at=completed)  # fmt: skip
    for content, hours in (("week-1", 2), ("week-2", 0.5)):
        lms_content.save(db, lms_content.ContentVersion(
            BERLIN, content, 1, content, seeded["course"], 1, MONDAY - timedelta(hours=hours)
        ))  # fmt: skip
    tenant = lms.tenant(db, BERLIN)
    assert tenant is not None
    queue = CatchUp(PostgresResource(url=db_url), tenant, load_settings(), MONDAY)
    away = TransientError("HTTP 503 on POST /webservice/rest/server.php", vendor="moodle")
    assert queue.park_late_certificates(away) == 1
    assert queue.park_late_publications(away) == 1
    assert queue.park_late_certificates(away) + queue.park_late_publications(away) == 0  # once
    items = sorted(_items(db), key=lambda item: item.kind)
    assert [(i.kind, i.owner, i.backup) for i in items] == [
        ("certificate", OWNER, BACKUP), ("publication", OWNER, BACKUP)
    ]  # fmt: skip
    assert items[0].what == f"certificate of L{learner} for course {seeded['course']}"
    assert items[1].what == "content week-1 v1 (week-1)"
    assert all("late: the tenant cannot be reached (moodle: HTTP 503" in i.reason for i in items)
    assert "not approved either" in items[1].reason
