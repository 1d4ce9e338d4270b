"""Lead intake, part 3, inside Dagster on a real Postgres against the sandbox's EspoCRM: one CRM
Lead per person however often and from wherever they come, a lost answer settled by a search, a
CRM outage ending in dead letters that a replay writes once, and shadow mode writing nothing."""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import psycopg
import pytest

from followup_pipeline.defs import build_definitions
from followup_pipeline.defs.alerts.checks import work_signals
from followup_pipeline.defs.lead_intake.crm_sender import CrmLeadSender, LeadWrite
from followup_pipeline.defs.lead_intake.upsert import CrmUpserter
from followup_pipeline.domain.work import Selection
from followup_pipeline.engine import work
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.engine.worker import WorkerRun
from followup_pipeline.integrations.espocrm_leads import ENTITY, EspoLeadWriter
from followup_pipeline.resources import PostgresResource
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.settings import load_settings
from followup_pipeline.store import lead_mode
from followup_pipeline.store import work as work_store
from followup_pipeline.store.alerts import record_dead_letters
from followup_pipeline.store.dead_letters import requeue_events
from followup_pipeline.store.lead_crm import LeadForCrm
from followup_pipeline_tests.defs.lead_intake.test_intake import (
    _fault,
    _form,
    _intake,
    _payment,
    _settings,
    _store,
)

#: One Dagster instance for the module's runs (making one costs about half a second a run).
SHARED: dict[str, dg.DagsterInstance] = {}


@pytest.fixture(autouse=True, scope="module")
def _shared_instance() -> Iterator[None]:
    with dg.instance_for_test() as instance:
        SHARED["instance"] = instance
        yield
    SHARED.clear()


def _crm(sandbox: str) -> httpx.Client:
    key = SandboxConfig().espocrm_api_key.get_secret_value()
    return httpx.Client(base_url=f"{sandbox}/espocrm/api/v1", headers={"X-Api-Key": key})


def _crm_leads(sandbox: str, email: str) -> list[dict[str, Any]]:
    params = {
        "where[0][type]": "equals",
        "where[0][attribute]": "emailAddress",
        "where[0][value]": email,
        "select": "id,name,emailAddress,phoneNumber,accountName,source,description,"
        "cFollowupPriority,cFollowupSegment,cFollowupIntent",
    }
    with _crm(sandbox) as crm:
        found: list[dict[str, Any]] = (
            crm.get("/Lead", params=params).raise_for_status().json()["list"]
        )
    return found


def _writes(sandbox: str) -> dict[str, int]:
    stats = httpx.get(f"{sandbox}/_sandbox/stats", timeout=5).raise_for_status().json()
    writes: dict[str, int] = stats["writes"].get("espocrm", {})
    return writes


def _run(defs: dg.Definitions, db_url: str, sandbox: str) -> dict[str, Any]:
    instance = SHARED["instance"]
    counts: dict[str, Any] = _intake(defs, db_url, sandbox, instance).output_for_node(
        "normalise_leads"
    )
    return counts


def test_crm_a_form_and_a_payment_each_sent_twice_make_one_crm_lead(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    defs = build_definitions(_settings(event_backoff_base_s=0))
    _store(db, "site-form", _form("Ada@Example.com", message="Was kostet das Angebot?"), "f1")
    _store(db, "site-form", _form("Ada@Example.com"), "f1")  # the same delivery again
    _store(db, "payment", _payment("ada@example.com"), "evt_1")
    _store(db, "payment", _payment("ada@example.com"), "evt_1")
    counts = _run(defs, db_url, sandbox)
    assert (counts["crm_created"], counts["crm_updated"]) == (1, 1)  # the payment adds the phone
    [lead] = _crm_leads(sandbox, "ada@example.com")
    assert (lead["name"], lead["accountName"], lead["source"]) == (
        "Ada Lovelace", "Analytical Engines", "Web Site"
    )  # fmt: skip
    assert lead["phoneNumber"] == "+49 30 1234"
    # The classification landed in the Lead's fields (the default map): the person's, from their
    # message; the payment, with no message of its own, did not make it a question of priority 3.
    assert (lead["cFollowupIntent"], lead["cFollowupPriority"]) == ("buy", 2)
    assert lead["cFollowupSegment"]
    assert lead["description"]
    stored = db.execute(
        "SELECT intent, priority, from_message, answer FROM lead_classifications ORDER BY id"
    ).fetchall()
    assert [(c["intent"], c["priority"], c["from_message"]) for c in stored] == [
        ("buy", 2, True), ("buy", 2, False),
    ]  # fmt: skip
    assert (stored[1]["answer"]["intent"], stored[1]["answer"]["priority"]) == ("question", 3)
    # The model was told of the person: the payment's amount, and their earlier message.
    asked = httpx.get(f"{sandbox}/_sandbox/mistral/requests", timeout=5).json()["requests"]
    texts = [m["content"] for r in asked for m in r["messages"] if m["role"] == "user"]
    paid = [t for t in texts if "Paid with this event: 49" in t][-1]  # this test's, the newest
    assert "ada@" not in paid  # masked
    assert re.search(r"^Paid with this event: 49(\.00)? EUR$", paid, re.MULTILINE), paid
    assert "message: Was kostet das Angebot?" in paid.split("Earlier events of this person")[1]
    row = db.execute("SELECT crm_lead_id, crm_written_at FROM leads").fetchone()
    assert row is not None
    assert row["crm_lead_id"] == lead["id"]
    assert row["crm_written_at"]
    actions = db.execute(
        "SELECT idempotency_key, outcome, provider_ref FROM actions WHERE kind = 'crm_lead'"
        " ORDER BY id"
    ).fetchall()
    assert [(a["outcome"], a["provider_ref"]) for a in actions] == [("accepted", lead["id"])] * 2
    assert all(a["idempotency_key"].endswith(":crm_upsert") for a in actions)
    # Run again, and replay both events as an operator would: nothing more is written.
    assert _run(defs, db_url, sandbox).get("events_claimed", 0) == 0
    ids = [r["id"] for r in db.execute("SELECT id FROM events ORDER BY id")]
    db.execute("UPDATE events SET status = 'dead' WHERE id = ANY(%s)", (ids,))
    assert requeue_events(db, ids)[0] == ids
    again = _run(defs, db_url, sandbox)
    assert again["events_done"] == 2
    assert "crm_created" not in again
    assert len(_crm_leads(sandbox, "ada@example.com")) == 1
    # Every write went to a Lead, and to nothing else.
    assert set(_writes(sandbox)) == {"POST Lead", "PUT Lead"}


@pytest.mark.parametrize("kind", ["apply_then_error", "drop_answer"])
def test_crm_a_lost_answer_to_the_create_is_found_by_search_and_not_made_twice(
    db: psycopg.Connection[Any], db_url: str, sandbox: str, kind: str
) -> None:
    defs = build_definitions(_settings(event_backoff_base_s=0, action_in_flight_s=0))
    _fault(sandbox, vendor="espocrm", kind=kind, method="POST", path="Lead", count=1)
    event = _store(db, "site-form", _form("lost@example.com"), "l1")
    first = _run(defs, db_url, sandbox)
    assert first["events_retried"] == 1
    action = db.execute("SELECT outcome, attempts FROM actions WHERE kind = 'crm_lead'").fetchone()
    assert action == {"outcome": "unknown", "attempts": 1}  # it may have been created
    assert len(_crm_leads(sandbox, "lost@example.com")) == 1  # and it was
    second = _run(defs, db_url, sandbox)
    assert second["events_done"] == 1
    assert "crm_created" not in second
    assert len(_crm_leads(sandbox, "lost@example.com")) == 1
    action = db.execute(
        "SELECT outcome, attempts, last_error FROM actions WHERE idempotency_key = %s",
        (f"lead:{event.event_id}:crm_upsert",),
    ).fetchone()
    assert action is not None
    assert action["outcome"] == "accepted"
    assert "found by e-mail after a lost answer" in action["last_error"]
    assert _writes(sandbox) == {"POST Lead": 1}


def test_crm_down_longer_than_the_retries_dead_letters_then_a_replay_writes_each_once(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    defs = build_definitions(_settings(event_backoff_base_s=0, lead_max_retries=1))
    _fault(sandbox, vendor="espocrm", kind="outage", seconds=600)
    emails = ["a@brandt-moebel.example", "c@gmail.com"]
    for index, email in enumerate(emails):
        _store(db, "site-form", _form(email, name=f"Person {index}"), f"o{index}")
    assert _run(defs, db_url, sandbox)["events_retried"] == 2
    assert _run(defs, db_url, sandbox)["events_dead"] == 2
    dead = db.execute(
        "SELECT id, dead_step, last_error FROM events WHERE status = 'dead' ORDER BY id"
    ).fetchall()
    assert [d["dead_step"] for d in dead] == ["0:crm_upsert"] * 2
    assert all("503" in d["last_error"] and "CRM Lead search" in d["last_error"] for d in dead)
    # Each waits in the work list, owned by operations; one alert each, named, to both.
    settings = _settings(ops_owner="ops@example.com", ops_backup="backup@example.com")
    work.sync(db, settings, at=datetime.now(UTC))
    signals, _ = work_signals(work_store.to_alert(db))
    keys = record_dead_letters(
        db, signals, at=datetime.now(UTC), limit=10, window=settings.alert_window()
    )
    assert sorted(k.split(":dead:")[1].split("@")[0] for k in keys) == sorted(
        f"event:{d['id']}" for d in dead
    )
    assert {s.also_to for s in signals} == {("ops@example.com", "backup@example.com")}
    # The earlier steps are done and kept: a replay does not ask the model again.
    asked = len(httpx.get(f"{sandbox}/_sandbox/mistral/requests", timeout=5).json()["requests"])
    httpx.delete(f"{sandbox}/_sandbox/faults", timeout=5).raise_for_status()
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_OPS_OWNER", "ops@example.com")
    from followup_pipeline.cli import main

    # Every dead letter of the step since this morning, in bulk: --dry lists, changes nothing.
    by_step = ["--step", "0:crm_upsert", "--since", "today", "--pipeline", "lead_intake"]
    capsys.readouterr()
    assert main(["work", "replay", *by_step, "--dry"]) == 0
    listed = capsys.readouterr().out
    assert "would replay 2 item(s)" in listed
    assert all(f"event:{d['id']}" in listed for d in dead)
    assert db.execute("SELECT count(*) AS n FROM events WHERE status = 'dead'").fetchone() == {
        "n": 2
    }
    assert main(["work", "replay", *by_step, "--by", "Ops Olga", "--reason", "CRM back"]) == 0
    audited = db.execute(
        "SELECT actor, subject, reason FROM audit_log WHERE action = 'work.replay' ORDER BY id"
    ).fetchall()
    assert [(a["actor"], a["reason"]) for a in audited] == [("Ops Olga", "CRM back")] * 2
    replayed = _run(defs, db_url, sandbox)
    assert (replayed["events_done"], replayed["crm_created"]) == (2, 2)
    asked_now = httpx.get(f"{sandbox}/_sandbox/mistral/requests", timeout=5).json()["requests"]
    assert len(asked_now) == asked
    # Done after the replay: the items close as replayed, by themselves.
    work.sync(db, settings, at=datetime.now(UTC))
    closed = work_store.select(db, Selection(pipeline="lead_intake", states=("closed",)))
    assert [(i.closed_how, i.replayed_by) for i in closed] == [("replayed", "Ops Olga")] * 2
    for email in emails:
        assert len(_crm_leads(sandbox, email)) == 1
    assert _run(defs, db_url, sandbox).get("events_claimed", 0) == 0


def test_crm_shadow_mode_writes_nothing_and_compare_shows_the_differences(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # The old automation made one of the two leads already, differently.
    with _crm(sandbox) as crm:
        crm.post("/Lead", json={"lastName": "Brandt", "emailAddress": "k@brandt-moebel.example",
                                "accountName": "Brandt"}).raise_for_status()  # fmt: skip
    before = _writes(sandbox)
    defs = build_definitions(_settings(event_backoff_base_s=0, lead_intake_mode="shadow"))
    _store(db, "site-form", _form("k@brandt-moebel.example", name="Karl Brandt"), "s1")
    _store(db, "site-form", _form("new@hughes-design.example", name="Olga Hughes"), "s2")
    counts = _run(defs, db_url, sandbox)
    assert counts["crm_shadow"] == 2
    assert _writes(sandbox) == before  # nothing written
    assert _crm_leads(sandbox, "new@hughes-design.example") == []
    shadow = db.execute(
        "SELECT outcome, reason, payload FROM actions WHERE kind = 'crm_lead' ORDER BY id"
    ).fetchall()
    assert [(s["outcome"], s["reason"]) for s in shadow] == [("suppressed", "shadow")] * 2
    assert [s["payload"]["op"] for s in shadow] == ["update", "create"]
    assert shadow[0]["payload"]["attributes"]["firstName"] == "Karl"  # fills what it lacks
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    # As on a machine `followup dev` started on its sandbox: the sandbox's settings in the home.
    key = SandboxConfig().espocrm_api_key.get_secret_value()
    monkeypatch.setenv("FOLLOWUP_HOME", str(tmp_path))
    (tmp_path / "sandbox.env").write_text(
        f"FOLLOWUP_ESPOCRM_URL={sandbox}/espocrm\nFOLLOWUP_ESPOCRM_API_KEY={key}\n"
    )
    from followup_pipeline.cli import main

    capsys.readouterr()
    assert main(["leads", "compare", "--since", "2020-01-01"]) == 0
    said = capsys.readouterr().out
    assert "new@hughes-design.example: create (shadow: not written" in said
    assert "the CRM has no Lead of this address" in said
    assert "k@brandt-moebel.example: update (shadow: not written" in said
    assert "firstName: pipeline 'Karl', CRM —" in said
    assert "2 lead(s) since 2020-01-01: 0 as the pipeline has it, 2 different, 0 unread" in said
    # The global dry run implies shadow mode, whatever the mode on record.
    db.execute("UPDATE lead_intake_mode SET mode = 'live'")
    assert lead_mode.in_force(db, load_settings()).mode == "live"
    assert lead_mode.in_force(db, load_settings(dry_run=True)).mode == "shadow"


def test_crm_a_create_refused_as_a_duplicate_updates_the_same_address_or_creates_past_a_name() -> (
    None
):
    """EspoCRM's duplicate check answers 409 with the duplicates (a JSON array): one of the same
    address is the person (updated); one of the same name only is someone else (created past
    the check with ``X-Skip-Duplicate-Check``)."""
    sent: list[httpx.Request] = []
    duplicates: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.method == "GET":
            return httpx.Response(200, json={"total": 0, "list": []})
        if request.method == "POST" and "x-skip-duplicate-check" not in request.headers:
            return httpx.Response(409, json=duplicates, headers={"X-Status-Reason": "duplicate"})
        body = json.loads(request.content)
        lead_id = request.url.path.rsplit("/", 1)[1] if request.method == "PUT" else "new1"
        answer = {**body, "id": lead_id, "modifiedAt": "2026-03-02 09:00:00"}
        return httpx.Response(200, json=answer)

    writer = EspoLeadWriter("http://crm.test", "k", transport=httpx.MockTransport(handler))
    wanted = {"firstName": "Ada", "lastName": "Lovelace", "emailAddress": "ada@example.com"}
    lead = LeadForCrm(1, "ada@example.com", "Ada Lovelace", None, None, "site-form", None, None, {})
    sender = CrmLeadSender(writer, LeadWrite(1, lead, None, wanted), Counter())
    duplicates[:] = [{"id": "old1", "name": "Ada Lovelace", "emailAddress": "ADA@example.com"}]
    record, op = sender.write()
    assert (record.id, op) == ("old1", "update")
    assert [(r.method, r.url.path) for r in sent[-1:]] == [("PUT", "/api/v1/Lead/old1")]
    sent.clear()
    duplicates[:] = [{"id": "other", "name": "Ada Lovelace", "emailAddress": "ada@else.example"}]
    record, op = sender.write()
    assert (record.id, op) == ("new1", "create")
    # Before creating past the check, the address is searched once more.
    assert [(r.method, r.headers.get("x-skip-duplicate-check")) for r in sent] == [
        ("POST", None), ("GET", None), ("POST", "true")
    ]  # fmt: skip


def test_crm_the_writer_reaches_lead_only_and_the_reader_sends_get_only() -> None:
    """No code path sends a write to ``Opportunity`` or any other entity: the one writer builds
    ``Lead`` paths only (an id of a record id's characters); the reader's one request sends GET."""
    import ast
    import inspect

    from followup_pipeline.integrations import espocrm

    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"id": "x", "modifiedAt": "2026-03-02 09:00:00"})

    writer = EspoLeadWriter("http://crm.test", "k", transport=httpx.MockTransport(handler))
    for bad in ("../Opportunity/1", "..", ".", "", "a/b", "x?y"):
        with pytest.raises(ValueError, match="not a Lead id"):
            writer.update(bad, {"stage": "Closed Won"})
    writer.update("65f1c2d3e4b5a6978", {"status": "New"})
    assert [(r.method, r.url.raw_path) for r in sent] == [
        ("PUT", b"/api/v1/Lead/65f1c2d3e4b5a6978")
    ]
    with pytest.raises(ValueError, match="reaches Lead only"):
        writer._send("PUT", "Opportunity/1", json={})
    assert ENTITY == "Lead"
    tree = ast.parse(inspect.getsource(espocrm))
    requests = [
        call
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("request", "post", "put", "patch", "delete", "send")
    ]
    methods = [c.args[0].value if c.args and isinstance(c.args[0], ast.Constant) else None
               for c in requests]  # fmt: skip
    assert methods == ["GET"]


def test_crm_attempted_is_on_record_before_the_create_leaves_and_no_transaction_stays_open(
    db: psycopg.Connection[Any], db_url: str
) -> None:
    """On a connection like the worker's (not autocommit), ``attempted`` is committed before
    the request: another connection sees it while the CRM answers."""
    from psycopg import pq

    from followup_pipeline.store import events, leads
    from followup_pipeline.store.db import connection_kwargs

    stored = _store(db, "site-form", _form("seen@example.com"), "v1")
    with db.transaction():
        lead = leads.LeadRow(email="seen@example.com", source="site-form", kind="form",
                             at=datetime.now(UTC), name="Seen Early")  # fmt: skip
        lead_id = leads.link_event(db, event_id=stored.event_id, lead=lead).lead_id
    key = f"lead:{stored.event_id}:crm_upsert"
    seen: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"total": 0, "list": []})
        seen.append(
            db.execute("SELECT outcome FROM actions WHERE idempotency_key = %s", (key,)).fetchone()
        )
        return httpx.Response(200, json={"id": "abc123", "modifiedAt": "2026-03-02 09:00:00"})

    writer = EspoLeadWriter("http://crm.test", "k", transport=httpx.MockTransport(handler))
    with psycopg.connect(db_url, **connection_kwargs()) as work:
        with work.transaction():
            event = events.event_by_id(work, stored.event_id)
        assert event is not None
        live = load_settings(lead_intake_mode="live")  # seeds the mode: an installation gone live
        scope = RunScope(datetime.now(UTC), "run-1", logging.getLogger("test.crm_upsert"))
        run = WorkerRun(work, PostgresResource(url=db_url), scope, live)
        upserter = CrmUpserter(run, writer, Counter())
        assert upserter.run(event, lead_id, now=datetime.now(UTC))
        assert work.info.transaction_status == pq.TransactionStatus.IDLE
    assert seen == [{"outcome": "attempted"}]
    row = db.execute("SELECT outcome, provider_ref FROM actions WHERE idempotency_key = %s", (key,))
    assert row.fetchone() == {"outcome": "accepted", "provider_ref": "abc123"}
    assert db.execute("SELECT status FROM events WHERE id = %s", (stored.event_id,)).fetchone() == {
        "status": "done"
    }


def test_crm_a_value_a_person_changed_in_the_crm_is_not_written_over(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    defs = build_definitions(_settings(event_backoff_base_s=0))
    _store(db, "site-form", _form("kept@example.com", message="Was kostet das Angebot?"), "k1")
    _run(defs, db_url, sandbox)
    [lead] = _crm_leads(sandbox, "kept@example.com")
    theirs = 1 if lead["cFollowupPriority"] != 1 else 4
    with _crm(sandbox) as crm:
        crm.put(f"/Lead/{lead['id']}", json={"cFollowupPriority": theirs}).raise_for_status()
    # The person pays later: the phone is filled in, the salesperson's priority stays.
    _store(db, "payment", _payment("kept@example.com"), "evt_k")
    assert _run(defs, db_url, sandbox)["crm_updated"] == 1
    [after] = _crm_leads(sandbox, "kept@example.com")
    assert (after["phoneNumber"], after["cFollowupPriority"]) == ("+49 30 1234", theirs)


def test_crm_a_leads_write_is_attempted_under_the_run_that_made_it(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    """The op hands the worker's handlers the run's scope: the CRM write's attempt carries the
    Dagster run's id."""
    defs = build_definitions(_settings(event_backoff_base_s=0))
    _store(db, "site-form", _form("run@example.com"), "r1")
    result = _intake(defs, db_url, sandbox, SHARED["instance"])
    attempts = db.execute(
        "SELECT t.run_id FROM action_attempts t JOIN actions a ON a.id = t.action_id"
        " WHERE a.kind = 'crm_lead'"
    ).fetchall()
    assert attempts == [{"run_id": result.run_id}]
