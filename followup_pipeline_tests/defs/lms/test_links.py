"""Signed links, end to end on a real Postgres, the sandbox and the ingress served over HTTP: a
learner's one-click opt-out from a reminder's ``List-Unsubscribe``, and an academy owner's
approval of a content version. A GET changes nothing; a forged, altered, expired, spent or
superseded link changes nothing and says so."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.defs.alerts.checks import work_signals
from followup_pipeline.defs.alerts.delivery import AlertDelivery
from followup_pipeline.defs.lms.catch_up import CatchUp
from followup_pipeline.domain import links as signed
from followup_pipeline.domain.work import Selection
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.ingress import create_app
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import load_settings
from followup_pipeline.store import alerts as alert_store
from followup_pipeline.store import events, links, lms, lms_content
from followup_pipeline.store import work as work_store
from followup_pipeline.store.lms_content import ContentVersion, publish_key
from followup_pipeline_tests.support import served

from .lms_world import BERLIN, SANDBOX, control, make_tenant, run_lms, seed_site, utc

#: The moment the ingress sees (the clicks' time, the links' expiry).
CLICKED = utc(2026, 3, 9, 10)


@pytest.fixture
def ingress(db_url: str) -> Iterator[httpx.Client]:
    """The ingress over the test's database, its clock at ``CLICKED``."""
    app = create_app(load_settings(), db_url, now=CLICKED.timestamp)
    with served(app) as base, httpx.Client(base_url=base, timeout=15) as client:
        yield client


def _path(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def _altered(path: str) -> str:
    """The path with one character of its token's MAC changed."""
    last = path[-1]
    return path[:-1] + ("A" if last != "A" else "B")


def _audit(db: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    rows = db.execute("SELECT action, detail FROM audit_log ORDER BY id").fetchall()
    return [(r["action"], r["detail"] or "") for r in rows]


def test_a_learner_opts_out_with_one_click_and_the_next_reminder_is_suppressed(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    ingress: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=2)
    # Moodle does not show the learners' own language: the academy's (German) applies.
    control(sandbox, "PATCH", f"/moodle/{BERLIN}", {"userdetails": False})
    make_tenant(db, sandbox, BERLIN, seeded["course"], language="de")
    run_lms(db_url, sandbox, utc(2026, 3, 6, 9))  # Friday: planned, nothing due
    run_lms(db_url, sandbox, utc(2026, 3, 9, 8, 5))  # Monday: before_due to both
    mails = control(sandbox, "GET", "/outbox")["messages"]
    assert len(mails) == 2
    first = mails[0]["message"]
    headers = {h["name"]: h["value"] for h in first["internetMessageHeaders"]}
    assert headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    url = headers["List-Unsubscribe"].strip("<>")
    assert url in first["textBody"]  # the visible link is the same
    learner = seeded["users"][0]
    assert first["toRecipients"][0]["emailAddress"]["address"] == f"learner0@{BERLIN}.example"

    # A mail scanner's GET: a page that asks, and nothing changes.
    page = ingress.get(_path(url))
    assert page.status_code == 200
    assert "Keine Erinnerungen" in page.text
    assert 'method="post"' in page.text
    # A forged token, an altered one, one of another purpose: refused, nothing stored.
    assert (
        ingress.post(_altered(_path(url)), content=b"List-Unsubscribe=One-Click").status_code == 403
    )
    assert ingress.post("/links/opt-out/k1.x.y", content=b"").status_code == 403
    other = _path(url).replace("/opt-out/", "/approve/")
    assert ingress.post(other).status_code == 403
    assert not lms.opted_out(db, BERLIN, learner, "before_due")
    assert db.execute("SELECT count(*) AS n FROM events WHERE source = 'link'").fetchone()["n"] == 0

    # RFC 8058's one-click POST: stored, applied, audited; a second click is done as before.
    click = ingress.post(
        _path(url),
        content=b"List-Unsubscribe=One-Click",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert click.status_code == 200
    assert "Erledigt" in click.text
    assert lms.opted_out(db, BERLIN, learner, "due_day")
    assert ingress.post(_path(url), content=b"List-Unsubscribe=One-Click").status_code == 200
    stored = db.execute("SELECT status, duplicate_count FROM events WHERE source = 'link'")
    assert [(r["status"], r["duplicate_count"]) for r in stored] == [("done", 1)]
    actions = [action for action, _ in _audit(db)]
    assert actions.count("lms.opt_out") == 1
    assert actions.count("link.used") == 1

    # Wednesday: the due-day reminder of the learner who opted out is suppressed, the other goes.
    counts = run_lms(db_url, sandbox, utc(2026, 3, 11, 8, 5))
    assert counts[f"{BERLIN}:suppressed_opted_out"] == 1
    outbox = control(sandbox, "GET", "/outbox")["messages"]
    assert [m["message"]["toRecipients"][0]["emailAddress"]["address"] for m in outbox[2:]] == [
        f"learner1@{BERLIN}.example"
    ]
    # An operator undoes it at the learner's request: reminders again.
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    assert main(["lms", "opt-in", BERLIN, str(learner), "--by", "Ops"]) == 0
    assert not lms.opted_out(db, BERLIN, learner, "overdue")
    assert main(["lms", "opt-in", BERLIN, str(learner), "--by", "Ops"]) == 1  # nothing to undo


def _content(db: psycopg.Connection[Any], content: str, version: int) -> str:
    row = ContentVersion(
        tenant_id=BERLIN, content_id=content, version=version, title=f"{content} handout",
        course_id=7, cmid=40, publish_at=CLICKED + timedelta(days=2),
    )  # fmt: skip
    with db.transaction():
        lms_content.save(db, row)
    return publish_key(BERLIN, content, version)


def _approve_link(db: psycopg.Connection[Any], key: str, version: int, at: datetime) -> str:
    content = key.split(":")[2]
    with db.transaction():
        issued = links.issue(db, "approve", key, BERLIN, at=at, content_id=content,
                             version=version)  # fmt: skip
    keys = links.link_keys(load_settings())
    return _path(signed.url("http://x", "approve", signed.sign(keys, "approve", issued.id)))


CONFIRM = {"confirm": "1"}  # the page's button


def _approved(db: psycopg.Connection[Any], content: str, version: int) -> str | None:
    row = db.execute(
        "SELECT approved_by FROM lms_content WHERE content_id = %s AND version = %s",
        (content, version),
    ).fetchone()
    return None if row is None else row["approved_by"]


def test_an_owner_approves_a_version_with_a_signed_link_once(
    db: psycopg.Connection[Any], sandbox: str, ingress: httpx.Client
) -> None:
    make_tenant(db, sandbox, BERLIN, 7, language="en")
    path = _approve_link(db, _content(db, "week-2", 1), 1, CLICKED - timedelta(hours=1))

    page = ingress.get(path)  # a GET approves nothing
    assert page.status_code == 200
    assert "Approve the content" in page.text
    assert _approved(db, "week-2", 1) is None
    assert ingress.post(_altered(path), data=CONFIRM).status_code == 403
    # A bare POST (a scanner's, no button) approves nothing either: the page asks.
    bare = ingress.post(path)
    assert bare.status_code == 400
    assert "Approve the content" in bare.text
    assert _approved(db, "week-2", 1) is None

    done = ingress.post(path, data=CONFIRM)
    assert done.status_code == 200
    assert "Approved" in done.text
    assert _approved(db, "week-2", 1) == f"owner of {BERLIN} (signed link)"
    assert ("content.approve", "v1 approved by signed link") in _audit(db)
    # The same link again: refused, nothing changes.
    again = ingress.post(path, data=CONFIRM)
    assert again.status_code == 409
    assert "done already" in again.text
    assert ingress.get(path).status_code == 409

    # A link for a version a later one superseded: refused.
    old = _approve_link(db, _content(db, "week-3", 1), 1, CLICKED - timedelta(hours=1))
    _content(db, "week-3", 2)
    assert ingress.post(old, data=CONFIRM).status_code == 409
    assert _approved(db, "week-3", 1) is None
    # An expired link (made 15 days before the click): refused.
    expired = _approve_link(db, _content(db, "week-4", 1), 1, CLICKED - timedelta(days=15))
    assert ingress.get(expired).status_code == 410
    assert ingress.post(expired, data=CONFIRM).status_code == 410
    assert _approved(db, "week-4", 1) is None
    # Audited: the one approval, and the refusal the link's row could not tell before it was
    # stored (its version superseded); a spent or expired link is refused before anything is
    # stored, so refusals cannot flood the event log or the audit.
    actions = [(a, d.split(": ")[1].split(" ")[0]) for a, d in _audit(db) if a.startswith("link.")]
    assert actions == [("link.used", "done;"), ("link.refused", "superseded")]
    stored = db.execute("SELECT count(*) AS n FROM events WHERE source = 'link'").fetchone()
    assert stored["n"] == 2


def test_an_owners_mail_goes_with_the_alert_and_its_approve_link_approves(
    db: psycopg.Connection[Any], db_url: str, sandbox: str, ingress: httpx.Client
) -> None:
    owner, backup = "owner@academy-berlin.example", "backup@academy-berlin.example"
    make_tenant(db, sandbox, BERLIN, 7, owner=owner, backup=backup, language="de")
    key = _content(db, "week-2", 1)
    settings = load_settings(ops_owner="ops@example.com")
    tenant = lms.tenant(db, BERLIN)
    assert tenant is not None
    resource = PostgresResource(url=db_url)
    # As a publishing run parks it: due soon, not approved.
    CatchUp(resource, tenant, settings, CLICKED).park(
        key, "publication", "content week-2 v1 (week-2 handout)", "due and not approved"
    )
    [signal] = work_signals(work_store.to_alert(db))[1]
    recorded = alert_store.record(db, signal, window=None)
    assert recorded is not None
    assert recorded.key is not None
    outlook = OutlookClient(
        f"{sandbox}/login", f"{sandbox}/graph", SANDBOX.graph_tenant_id, SANDBOX.graph_client_id,
        SANDBOX.graph_client_secret.get_secret_value(), "followup@example.com",
    )  # fmt: skip
    with closing(outlook):
        run = RunScope(CLICKED, "alert-run", logging.getLogger("alert"))
        delivered = AlertDelivery(run, resource, outlook, None, settings).deliver(recorded.key)
    assert delivered.channel == "mail"
    sent = [m["message"] for m in control(sandbox, "GET", "/outbox")["messages"]]
    to = [sorted(r["emailAddress"]["address"] for r in m["toRecipients"]) for m in sent]
    assert to == [["ops@example.com"], sorted([owner, backup])]
    mail = sent[1]
    # What waits and why, in the subject (the academy by the name make_tenant gives).
    assert mail["subject"] == f"{BERLIN}: „week-2 handout“ wartet auf Ihre Freigabe"
    text = mail["textBody"]
    assert "„week-2 handout“ (Version 1) soll am Mittwoch, 11. März" in text
    assert "followup" not in text  # no command: a button, and whom to ask
    assert "ops@example.com" in text
    approve = next(line for line in text.splitlines() if "Freigeben: " in line)
    path = _path(approve.split("Freigeben: ", 1)[1])
    assert "/links/approve/" in path
    assert ingress.post(path, data=CONFIRM).status_code == 200
    assert _approved(db, "week-2", 1) == f"owner of {BERLIN} (signed link)"
    # The other button: the item acknowledged, once; the alerts about it stop.
    seen = next(line for line in text.splitlines() if "ich kümmere mich: " in line)
    path = _path(seen.split("ich kümmere mich: ", 1)[1])
    assert ingress.post(path, data=CONFIRM).status_code == 200
    [item] = work_store.select(db, Selection(states=("acknowledged",)))
    assert item.acknowledged_by == f"owner of {BERLIN} (signed link)"
    assert ingress.post(path, data=CONFIRM).status_code == 409


def test_a_click_stored_but_not_applied_is_applied_by_the_next_run_as_of_its_moment(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    """The ingress died between its commit and the apply: the click waits as an event, and the
    next learning run applies it, judged at the moment it was clicked (its link has expired
    since); a click younger than the ingress's own turn is left to the ingress."""
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=1)
    make_tenant(db, sandbox, BERLIN, seeded["course"])
    learner = seeded["users"][0]
    clicked = utc(2026, 3, 9, 10)
    with db.transaction():
        made = clicked - timedelta(days=89)
        issued = links.issue(db, "opt_out", "lms:a-reminder", BERLIN, at=made, learner_id=learner)
    for at in (clicked, utc(2026, 6, 1, 9, 59, 50)):  # the second: seconds before the run
        events.store_delivery(
            db, source=links.SOURCE, event_type="opt_out",
            body=links.click_body(issued.id, "opt_out"),
            headers={}, received_at=at,
        )  # fmt: skip
    counts = run_lms(db_url, sandbox, utc(2026, 6, 1, 10))  # long after the link expired
    assert (counts["link_clicks_applied"], counts["link_clicks_failed"]) == (1, 0)
    assert lms.opted_out(db, BERLIN, learner, "overdue")
    rows = db.execute("SELECT status FROM events WHERE source = 'link' ORDER BY id").fetchall()
    assert [r["status"] for r in rows] == ["done", "pending"]
