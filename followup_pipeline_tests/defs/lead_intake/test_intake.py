"""Lead intake, part 1, inside Dagster on a real Postgres: site forms, payments and the CRM's
leads become one lead per person; a body that makes no lead is a dead letter naming the field,
replayed by its id after the fix; the sensor launches ``lead_intake`` for the lead sources only."""

from __future__ import annotations

import json
from typing import Any

import dagster as dg
import httpx
import psycopg
import pytest

from followup_pipeline.defs import build_definitions
from followup_pipeline.engine.runs import OUTCOME_TAG
from followup_pipeline.integrations.resources import (
    CompanyLookupResource,
    EspoCrmResource,
    MistralResource,
)
from followup_pipeline.resources import ClockResource, PostgresResource
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.settings import load_settings
from followup_pipeline.store.events import store_delivery


def _form(email: str, **data: Any) -> bytes:
    body = {"type": "form.submitted", "timestamp": "2026-03-02T09:00:00Z",
            "data": {"name": "Ada Lovelace", "email": email, "company": "Analytical Engines",
                     "consent": True, "page": "/pricing", **data}}  # fmt: skip
    return json.dumps(body).encode()


def _payment(email: str, event_type: str = "checkout.session.completed") -> bytes:
    body = {"id": "evt_1", "object": "event", "type": event_type, "livemode": False,
            "data": {"object": {"id": "cs_1", "object": "checkout.session", "amount_total": 4900,
                                "currency": "eur", "payment_status": "paid",
                                "customer_details": {"email": email, "name": "Ada L.",
                                                     "phone": "+49 30 1234"}}}}  # fmt: skip
    return json.dumps(body).encode()


def _store(db: psycopg.Connection[Any], source: str, body: bytes, delivery_id: str) -> Any:
    kind = json.loads(body)["type"]
    return store_delivery(
        db, source=source, event_type=kind, body=body, headers={}, delivery_id=delivery_id
    )


def _resources(db_url: str, sandbox: str) -> dict[str, Any]:
    """The real resources on the sandbox's vendors."""
    config = SandboxConfig()
    return {
        "postgres": PostgresResource(url=db_url),
        "espocrm": EspoCrmResource(
            base_url=f"{sandbox}/espocrm", api_key=config.espocrm_api_key.get_secret_value()
        ),
        "company_lookup": CompanyLookupResource(
            base_url=f"{sandbox}/pdl", api_key=config.pdl_api_key.get_secret_value()
        ),
        "mistral": MistralResource(
            base_url=f"{sandbox}/mistral",
            api_key=config.mistral_api_key.get_secret_value(),
            model="mistral-small-latest",
        ),
        "clock": ClockResource(),
    }


def _intake(defs: dg.Definitions, db_url: str, sandbox: str, instance: dg.DagsterInstance) -> Any:
    job = defs.resolve_job_def("lead_intake")
    return job.execute_in_process(instance=instance, resources=_resources(db_url, sandbox))


def _settings(**values: Any) -> Any:
    """The machine's settings with the sandbox's company lookup key (the lookup is on), as an
    installation that went live (the mode seeded ``live``; test_lead_mode.py starts in shadow)."""
    key = SandboxConfig().pdl_api_key.get_secret_value()
    return load_settings(company_lookup_api_key=key, **{"lead_intake_mode": "live", **values})


@pytest.fixture
def defs() -> dg.Definitions:
    return build_definitions(_settings(event_backoff_base_s=0))


def test_lead_a_form_and_a_payment_of_one_person_are_one_lead(
    defs: dg.Definitions, db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    form = _store(db, "site-form", _form("Ada@Example.com "), "msg_1")
    # Each sender delivers twice: one event each.
    assert _store(db, "site-form", _form("Ada@Example.com "), "msg_1").duplicate
    paid = _store(db, "payment", _payment("ada@example.com"), "evt_1")
    assert _store(db, "payment", _payment("ada@example.com"), "evt_1").duplicate
    with dg.instance_for_test() as instance:
        result = _intake(defs, db_url, sandbox, instance)
        run = instance.get_run_by_id(result.run_id)
    assert run is not None
    assert run.tags[OUTCOME_TAG] == "ok"
    counts = result.output_for_node("normalise_leads")
    assert (counts["received"], counts["normalised"]) == (2, 2)
    assert (counts["new_leads"], counts["duplicates"]) == (1, 1)
    [lead] = db.execute("SELECT * FROM leads").fetchall()
    assert (lead["email"], lead["name"], lead["company"]) == (
        "ada@example.com", "Ada Lovelace", "Analytical Engines"
    )  # fmt: skip
    assert (lead["consent"], lead["first_source"]) == (True, "site-form")
    linked = db.execute(
        "SELECT event_id, source, amount, currency FROM lead_events ORDER BY event_id"
    ).fetchall()
    assert [(r["event_id"], r["source"]) for r in linked] == [
        (form.event_id, "site-form"), (paid.event_id, "payment")
    ]  # fmt: skip
    assert (float(linked[1]["amount"]), linked[1]["currency"]) == (49.0, "EUR")
    keys = {r["key"] for r in db.execute("SELECT key FROM step_completions")}
    steps = ("normalise", "enrich", "classify", "crm_upsert")
    assert keys == {f"{e.event_id}:0:{step}" for e in (form, paid) for step in steps}


def test_lead_a_payment_of_another_type_is_stored_and_ignored(
    defs: dg.Definitions, db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    _store(db, "payment", _payment("x@example.com", "payment_intent.created"), "evt_2")
    with dg.instance_for_test() as instance:
        counts = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert counts["ignored"] == 1
    assert db.execute("SELECT count(*) AS n FROM leads").fetchone() == {"n": 0}
    assert db.execute("SELECT status FROM events").fetchone() == {"status": "done"}


def test_lead_a_malformed_form_is_a_dead_letter_naming_the_field_and_a_replay_makes_it_once(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    # The form builder calls the address "e-mail": no lead, a dead letter at once.
    body = json.dumps({"type": "form.submitted", "data": {"e-mail": "grace@example.com"}})
    event = _store(db, "site-form", body.encode(), "msg_bad")
    with dg.instance_for_test() as instance:
        result = _intake(build_definitions(_settings()), db_url, sandbox, instance)
        assert instance.get_run_by_id(result.run_id).tags[OUTCOME_TAG] == "partial"  # type: ignore[union-attr]
    row = db.execute("SELECT status, last_error, dead_step, body FROM events").fetchone()
    assert row is not None
    assert (row["status"], row["dead_step"]) == ("dead", "0:normalise")
    assert "data.email: field required" in row["last_error"]
    assert bytes(row["body"]) == body.encode()  # the raw body kept for the operator
    # The fix: the form's field name is mapped. A replay by the original id makes the lead once.
    fixed = build_definitions(_settings(site_form_fields='{"email": "e-mail"}'))
    names = {"ops": {"replay_dead_letters": {"config": {"names": [f"event:{event.event_id}"]}}}}
    with dg.instance_for_test() as instance:
        for _ in range(2):
            replay = fixed.resolve_job_def("replay").execute_in_process(
                run_config=names, instance=instance, resources=_resources(db_url, sandbox)
            )
            assert replay.success
    assert db.execute("SELECT email FROM leads").fetchall() == [{"email": "grace@example.com"}]
    assert db.execute("SELECT count(*) AS n FROM lead_events").fetchone() == {"n": 1}


def test_lead_events_sensor_launches_lead_intake_for_lead_sources_only(
    defs: dg.Definitions, db: psycopg.Connection[Any], db_url: str
) -> None:
    def tick(name: str, instance: dg.DagsterInstance) -> dg.SensorExecutionData:
        with dg.build_sensor_context(
            instance=instance,
            resources={"postgres": PostgresResource(url=db_url)},
            repository_def=defs.get_repository_def(),
        ) as context:
            return defs.resolve_sensor_def(name).evaluate_tick(context)

    _store(db, "site-form", _form("ada@example.com"), "msg_3")
    with dg.instance_for_test() as instance:
        assert tick("crm_events", instance).skip_message == "no events due"
        launched = tick("lead_events", instance)
    assert launched.run_requests is not None
    [request] = launched.run_requests
    assert (request.run_key or "").startswith("lead_intake-1-")


def test_lead_retries_follow_the_reference() -> None:
    settings = load_settings(lead_max_retries=5, event_max_attempts=3)
    # max_retries 5: five retries after the first attempt.
    assert settings.event_attempts("payment") == 6
    assert settings.event_attempts("espocrm") == 3


def test_lead_typed_into_the_crm_is_taken_in_by_the_next_sweep_exactly_once(
    defs: dg.Definitions, db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    import httpx

    from followup_pipeline.resources import ClockResource
    from followup_pipeline.sandbox.config import SandboxConfig

    key = SandboxConfig().espocrm_api_key.get_secret_value()
    typed = {"firstName": "Grace", "lastName": "Hopper", "emailAddress": "Grace@Navy.example",
             "accountName": "US Navy", "status": "New", "source": "Call"}  # fmt: skip
    # A lead this product writes itself: the sweep must leave that version out.
    _store(db, "site-form", _form("ours@example.com", name="Written By Us"), "msg_ours")
    sweep = defs.resolve_job_def("crm_changes")
    with dg.instance_for_test() as instance:
        _intake(defs, db_url, sandbox, instance)
        with httpx.Client(base_url=f"{sandbox}/espocrm/api/v1", headers={"X-Api-Key": key}) as crm:
            crm_id = crm.post("/Lead", json=typed).raise_for_status().json()["id"]
        resources = {**_resources(db_url, sandbox), "clock": ClockResource()}
        first = sweep.execute_in_process(instance=instance, resources=resources)
        counts = first.output_for_node("sweep_crm_leads")
        assert (counts["stored"], counts["ours"]) == (1, 1)
        again = sweep.execute_in_process(instance=instance, resources=resources)
        assert again.output_for_node("sweep_crm_leads").get("stored", 0) == 0  # read, not kept
        taken = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
        assert taken["crm_updated"] == 1  # the typed Lead gets its classification
        # That write is ours too: the next sweep reads it and keeps nothing.
        third = sweep.execute_in_process(instance=instance, resources=resources)
        assert third.output_for_node("sweep_crm_leads").get("stored", 0) == 0
    grace = db.execute(
        "SELECT email, name, company, crm_lead_id FROM leads WHERE email LIKE 'grace%'"
    ).fetchone()
    assert grace == {"email": "grace@navy.example", "name": "Grace Hopper",
                     "company": "US Navy", "crm_lead_id": crm_id}  # fmt: skip
    assert db.execute(
        "SELECT count(*) AS n FROM events WHERE source = 'crm-changes'"
    ).fetchone() == {"n": 1}


def test_lead_sweep_keeps_a_crm_lead_that_breaks_its_schema_as_a_dead_letter(
    db: psycopg.Connection[Any], db_url: str
) -> None:
    import logging
    from datetime import UTC, datetime

    import httpx

    from followup_pipeline.defs.lead_intake.sweep import sweep
    from followup_pipeline.engine.scope import RunScope
    from followup_pipeline.integrations.espocrm import EspoCrmClient

    good = {"id": "L1", "name": "Ok Lead", "emailAddress": "ok@example.com", "status": "New",
            "createdAt": "2026-03-02 08:00:00", "modifiedAt": "2026-03-02 08:00:00"}  # fmt: skip
    broken = {**good, "id": "L2", "emailAddress": "b@example.com", "modifiedAt": "yesterday"}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"total": 2, "list": [good, broken]})

    crm = EspoCrmClient("http://crm.test/espocrm", "k", transport=httpx.MockTransport(handler))
    now = datetime(2026, 3, 3, 2, 0, tzinfo=UTC)
    swept = sweep(
        RunScope(now, "run-1", logging.getLogger("test")), PostgresResource(url=db_url), crm
    )
    assert swept.complete
    assert (swept.tally.counts["stored"], swept.tally.counts["invalid"]) == (1, 1)
    rows = db.execute("SELECT status, last_error, body FROM events ORDER BY status").fetchall()
    assert [r["status"] for r in rows] == ["dead", "pending"]
    assert "modifiedAt" in rows[0]["last_error"]
    assert json.loads(bytes(rows[0]["body"]))["id"] == "L2"  # the raw record, for the operator
    cursor = db.execute("SELECT position FROM job_cursors WHERE name = 'crm_changes'").fetchone()
    assert cursor == {"position": datetime(2026, 3, 2, 8, 0, tzinfo=UTC)}


def _fault(sandbox: str, **spec: Any) -> None:
    import httpx

    httpx.post(f"{sandbox}/_sandbox/faults", json=spec, timeout=5).raise_for_status()


def test_lead_from_a_company_domain_is_enriched_and_classified_once_per_domain(
    defs: dg.Definitions, db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    asks = _form("k.brandt@brandt-moebel.example", message="Was kostet das Angebot?")
    _store(db, "site-form", asks, "m1")
    _store(db, "site-form", _form("sales@brandt-moebel.example"), "m2")  # the same company
    _store(db, "site-form", _form("grace@gmail.com"), "m3")  # free mail: no lookup
    with dg.instance_for_test() as instance:
        counts = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert (counts["looked_up"], counts["cached"], counts["free_mail"]) == (1, 1, 1)
    assert (counts["enriched"], counts["classified"]) == (2, 3)
    brandt = db.execute(
        "SELECT company_domain, company_facts FROM leads WHERE email = %s",
        ("k.brandt@brandt-moebel.example",),
    ).fetchone()
    assert brandt is not None
    assert brandt["company_domain"] == "brandt-moebel.example"
    assert brandt["company_facts"]["name"]
    free = db.execute("SELECT company_domain FROM leads WHERE email = 'grace@gmail.com'").fetchone()
    assert free == {"company_domain": None}
    rows = db.execute(
        "SELECT c.intent, c.priority, c.language, c.source FROM lead_classifications c"
        " JOIN lead_events e ON e.event_id = c.event_id ORDER BY c.event_id"
    ).fetchall()
    assert len(rows) == 3
    assert {r["source"] for r in rows} == {"model"}
    assert all(1 <= r["priority"] <= 4 for r in rows)
    assert rows[0]["intent"] == "buy"
    assert rows[0]["language"] == "de"
    # The lookup was asked once for the company's two leads.
    stats = db.execute("SELECT count(*) AS n FROM company_lookups").fetchone()
    assert stats == {"n": 1}


def test_lead_lookup_404_continues_429_waits_and_an_outage_is_a_dead_letter_a_replay_ends(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    defs = build_definitions(_settings(event_backoff_base_s=0, lead_max_retries=0))
    _store(db, "site-form", _form("x@unknown-company.example"), "u1")  # PDL does not know it
    _fault(sandbox, vendor="pdl", kind="rate_limit", count=1, retry_after=1)
    _store(db, "site-form", _form("o@hughes-design.example"), "h1")
    with dg.instance_for_test() as instance:
        counts = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert (counts["looked_up"], counts["enriched"], counts["classified"]) == (2, 1, 2)
    # The lookup is down for longer than its retries: the event is a dead letter at `enrich`.
    _fault(sandbox, vendor="pdl", kind="error", status=503, count=20)
    lost = _store(db, "site-form", _form("n@nordwerk.example"), "n1")
    with dg.instance_for_test() as instance:
        _intake(defs, db_url, sandbox, instance)
    dead = db.execute("SELECT status, dead_step FROM events WHERE id = %s", (lost.event_id,))
    assert dead.fetchone() == {"status": "dead", "dead_step": "0:enrich"}
    import httpx

    httpx.delete(f"{sandbox}/_sandbox/faults", timeout=5).raise_for_status()
    names = {"ops": {"replay_dead_letters": {"config": {"names": [f"event:{lost.event_id}"]}}}}
    with dg.instance_for_test() as instance:
        replay = defs.resolve_job_def("replay").execute_in_process(
            run_config=names, instance=instance, resources=_resources(db_url, sandbox)
        )
    assert replay.success
    done = db.execute(
        "SELECT count(*) AS n FROM lead_classifications WHERE event_id = %s", (lost.event_id,)
    ).fetchone()
    assert done == {"n": 1}


def test_lead_a_model_answer_that_breaks_lead_v2_waits_in_review_until_accepted(
    defs: dg.Definitions,
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from followup_pipeline.cli import main

    _fault(sandbox, vendor="mistral", kind="invalid_output", count=1,
           content='{"segment": "enterprise", "priority": 9}')  # fmt: skip
    event = _store(db, "site-form", _form("o@hughes-design.example"), "r1")
    with dg.instance_for_test() as instance:
        counts = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert counts["sent_to_review"] == 1
    [item] = db.execute("SELECT id, subject_type, subject_id, raw_output, error FROM review_items")
    assert (item["subject_type"], item["subject_id"]) == ("LeadEvent", str(event.event_id))
    assert item["raw_output"] == '{"segment": "enterprise", "priority": 9}'  # the raw text kept
    assert "priority" in item["error"]
    # Nothing went on: no classification until a person decides.
    assert db.execute("SELECT count(*) AS n FROM lead_classifications").fetchone() == {"n": 0}
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    answer = json.dumps({"segment": "small_business", "intent": "question", "priority": 3,
                         "summary": "Fragt nach dem Angebot.", "language": "de",
                         "reasons": ["asks about the offer"]})  # fmt: skip
    assert main(["review", "accept", str(item["id"])]) == 1  # the raw answer breaks lead.v2
    said = capsys.readouterr()
    assert "breaks lead.v2" in said.out + said.err
    assert main(["review", "accept", str(item["id"]), "--answer", answer]) == 0
    assert main(["review", "accept", str(item["id"]), "--answer", answer]) == 1  # settled
    rows = db.execute("SELECT source, priority FROM lead_classifications").fetchall()
    assert rows == [{"source": "review", "priority": 3}]  # once
    # Accepted, the event goes on: its CRM Lead is written with the accepted classification.
    with dg.instance_for_test() as instance:
        counts = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert (counts["events_done"], counts["crm_created"]) == (1, 1)
    with httpx.Client(base_url=f"{sandbox}/espocrm/api/v1") as crm:
        key = SandboxConfig().espocrm_api_key.get_secret_value()
        [lead] = crm.get("/Lead", headers={"X-Api-Key": key}).raise_for_status().json()["list"]
    assert (lead["emailAddress"], lead["cFollowupPriority"]) == ("o@hughes-design.example", 3)


def test_lead_a_spent_model_budget_defers_the_lead_an_hour_without_an_attempt(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    defs = build_definitions(_settings(enrich_budget_calls=1))
    _store(db, "site-form", _form("o@hughes-design.example"), "b1")
    later = _store(db, "site-form", _form("k@brandt-moebel.example"), "b2")
    with dg.instance_for_test() as instance:
        counts = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert (counts["classified"], counts["deferred_by_budget"]) == (1, 1)
    row = db.execute(
        "SELECT status, attempts, next_attempt_at - now() AS wait FROM events WHERE id = %s",
        (later.event_id,),
    ).fetchone()
    assert row is not None
    assert (row["status"], row["attempts"]) == ("pending", 0)
    assert 3500 < row["wait"].total_seconds() <= 3600  # the database's hour, as the claim's


def test_lead_review_flags_must_fit_the_item_and_a_crm_edit_is_not_classified_again(
    defs: dg.Definitions,
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from followup_pipeline.cli import main

    _fault(sandbox, vendor="mistral", kind="invalid_output", count=1, content="not json")
    _store(db, "site-form", _form("o@hughes-design.example"), "f1")
    crm = {"id": "L9", "emailAddress": "o@hughes-design.example", "modifiedAt": "x"}
    with dg.instance_for_test() as instance:
        _intake(defs, db_url, sandbox, instance)
        store_delivery(
            db, source="crm-changes", event_type="Lead.changed", body=json.dumps(crm).encode(),
            headers={}, delivery_id="L9@1",
        )  # fmt: skip
        first = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert first.get("classified") == 1  # the CRM's event: the lead had none yet
    again = {**crm, "description": "edited"}
    store_delivery(
        db, source="crm-changes", event_type="Lead.changed", body=json.dumps(again).encode(),
        headers={}, delivery_id="L9@2",
    )  # fmt: skip
    with dg.instance_for_test() as instance:
        counts = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert counts["already_classified"] == 1
    assert "classified" not in counts
    [item] = db.execute("SELECT id FROM review_items").fetchall()
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    assert main(["review", "accept", str(item["id"]), "--line1", "a", "--line2", "b"]) == 1
    assert main(["review", "reject", str(item["id"]), "--reason", "a test form"]) == 0
    step = db.execute("SELECT result FROM step_completions WHERE key LIKE '%%:0:review'")
    assert step.fetchone() == {"result": {"rejected": "a test form"}}


def test_lead_the_deal_summaries_of_the_last_hour_count_against_the_same_budget(
    db: psycopg.Connection[Any], db_url: str, sandbox: str
) -> None:
    db.execute(
        "INSERT INTO enrichments (subject_id, input_hash, line1, line2, model, prompt_tokens,"
        " completion_tokens, created_at) VALUES ('d1', 'h', 'a', 'b', 'm', 10, 5, now())"
    )
    defs = build_definitions(_settings(enrich_budget_calls=1))
    _store(db, "site-form", _form("o@hughes-design.example"), "s1")
    with dg.instance_for_test() as instance:
        counts = _intake(defs, db_url, sandbox, instance).output_for_node("normalise_leads")
    assert counts["deferred_by_budget"] == 1
    assert "classified" not in counts
