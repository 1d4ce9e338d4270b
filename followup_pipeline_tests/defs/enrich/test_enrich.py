"""``enrich`` end to end: the real ``mistralai`` SDK against the sandbox, real Postgres."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.defs import enrich
from followup_pipeline.engine.runs import OUTCOME_TAG
from followup_pipeline.store.events import gauges

from ..evaluate.conftest import MONDAY, Machine

ANSWER = "Die Kundin fragt nach dem Rabatt."
BODY = "Guten Tag,\n\nwir prüfen Ihr Angebot über 15.000 EUR bis Freitag.\n\nViele Grüße\nAnna"


def _counts(machine: Machine, result: Any) -> dict[str, Any]:
    [output] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = output.event_specific_data.metadata
    return {key: value.value for key, value in metadata.items()}


def _summaries(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(db.execute("SELECT * FROM enrichments ORDER BY id").fetchall())


def _reviews(db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(db.execute("SELECT * FROM review_items ORDER BY id").fetchall())


def test_enrich_calls_the_model_only_for_changed_emails(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    machine.sandbox_clock(MONDAY - timedelta(hours=1))  # the CRM stamps e-mails with its clock
    deals = [machine.deal(name=f"Angebot {n}") for n in range(50)]
    silent = machine.deal(name="Ohne Post")
    for deal in deals:
        machine.email(deal, BODY)
    machine.evaluate(MONDAY)  # opens the 51 watches

    first = machine.enrich(MONDAY + timedelta(minutes=30))
    assert len(machine.model_requests()) == 50
    counts = _counts(machine, first)
    assert (counts["summarised"], counts["without_emails"]) == (50, 1)
    assert counts["prompt_tokens"] > 0
    assert len(_summaries(db)) == 50
    assert all(s["prompt_tokens"] and s["completion_tokens"] for s in _summaries(db))

    second = machine.enrich(MONDAY + timedelta(hours=1, minutes=30))
    assert len(machine.model_requests()) == 50  # nothing changed: no call
    # Not even a look: the listing since the cursor found no new e-mail, so nothing was queued.
    assert _counts(machine, second).get("new_emails", 0) == 0
    assert _counts(machine, second).get("looked_at", 0) == 0

    machine.sandbox_clock(MONDAY + timedelta(hours=2))
    machine.email(deals[7], "Wir nehmen das Angebot an, bitte senden Sie den Vertrag.")
    third = machine.enrich(MONDAY + timedelta(hours=2, minutes=30))
    assert (_counts(machine, third)["new_emails"], _counts(machine, third)["looked_at"]) == (1, 1)
    requests = machine.model_requests()
    assert len(requests) == 51  # exactly one call, for the one deal with a new e-mail
    assert "Angebot 7" in requests[-1]["messages"][1]["content"]
    assert _counts(machine, third)["summarised"] == 1
    assert silent not in {s["subject_id"] for s in _summaries(db)}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("Here is the summary: they want a discount.", "Invalid JSON"),
        (json.dumps({"line1": "a", "line2": "b", "line3": "c"}), "line3"),
        (json.dumps({"line1": "Sie prüfen das Angebot.", "line2": " "}), "the line is empty"),
        (json.dumps({"line1": "x" * 161, "line2": "Nachfassen."}), "more than 160"),
        (
            json.dumps({"line1": "Angebot über 18.000 EUR.", "line2": "Nachfassen."}),
            "number(s) 18000 do not occur",
        ),
        (json.dumps({"line1": "Müller GmbH", "line2": "Nachfassen."}), "only repeats the deal"),
    ],
)
def test_enrich_answers_that_fail_the_check_go_to_review(
    content: str,
    reason: str,
    machine: Machine,
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    deal = machine.deal(name="Müller GmbH")
    machine.email(deal, BODY)
    machine.evaluate(MONDAY)
    machine.fault(vendor="mistral", kind="invalid_output", content=content)
    result = machine.enrich(MONDAY + timedelta(minutes=30))
    assert _summaries(db) == []
    [item] = _reviews(db)
    assert item["raw_output"] == content
    assert reason in item["error"], item["error"]
    assert item["input_hash"]
    assert item["resolved_at"] is None
    assert _counts(machine, result)["sent_to_review"] == 1

    # The same input again: no new call, no second item.
    machine.enrich(MONDAY + timedelta(hours=1, minutes=30))
    assert len(machine.model_requests()) == 1
    assert len(_reviews(db)) == 1

    assert gauges(db)["review_open"] == 1  # /metrics: followup_review_items_open
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    assert main(["review", "list"]) == 0
    assert reason in capsys.readouterr().out
    line1 = "Prüfung des Angebots über 15.000 EUR."
    corrected = ["--line1", line1, "--line2", "Freitag nachfassen."]
    assert main(["review", "accept", str(item["id"]), *corrected]) == 0
    [summary] = _summaries(db)
    assert (summary["line1"], summary["source"]) == (line1, "review")
    assert _reviews(db)[0]["resolution"] == "accepted"
    assert gauges(db)["review_open"] == 0
    assert main(["review", "accept", str(item["id"])]) == 1  # settled already
    capsys.readouterr()
    assert main(["watches", "show", str(machine.watch(deal)["id"])]) == 0
    shown = capsys.readouterr().out
    assert line1 in shown
    # The team's local time with its zone, for people; no raw UTC, no microseconds.
    assert "registered_at: 2026-03-02 09:00 CET" in shown


def test_enrich_rejected_item_leaves_the_deal_without_a_summary_until_it_changes(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    deal = machine.deal(name="Schulz AG")
    machine.email(deal, BODY)
    machine.evaluate(MONDAY)
    machine.fault(vendor="mistral", kind="invalid_output", count=1)
    machine.enrich(MONDAY + timedelta(minutes=30))
    [item] = _reviews(db)
    # Rejected from the Launchpad, as the `review` job.
    job = machine.job(enrich, "review", machine.resources(MONDAY))
    config = {
        "ops": {"settle_review_item": {"config": {"item_id": item["id"], "action": "reject"}}}
    }
    assert job.execute_in_process(instance=machine.instance, run_config=config).success
    assert _reviews(db)[0]["resolution"] == "rejected"
    machine.enrich(MONDAY + timedelta(hours=1, minutes=30))
    assert _summaries(db) == []
    assert len(machine.model_requests()) == 1
    machine.email(deal, "Wir haben noch eine Frage zur Lieferzeit.")
    machine.enrich(MONDAY + timedelta(hours=2, minutes=30))
    assert len(_summaries(db)) == 1


def test_enrich_waits_out_a_429_and_retries_a_malformed_answer_next_run(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    first, second = machine.deal(name="Eins"), machine.deal(name="Zwei")
    machine.email(first, BODY)
    machine.evaluate(MONDAY)
    machine.fault(vendor="mistral", kind="rate_limit", count=1, retry_after=2)
    started = time.monotonic()
    machine.enrich(MONDAY + timedelta(minutes=30))
    assert time.monotonic() - started >= 2  # Retry-After was honoured, not just any retry
    assert [s["subject_id"] for s in _summaries(db)] == [first]  # the SDK waited and asked again

    machine.email(second, BODY)
    machine.fault(vendor="mistral", kind="malformed", count=1)
    result = machine.enrich(MONDAY + timedelta(hours=1, minutes=30))
    assert machine.outcome(result) == "partial"
    assert _counts(machine, result)["failed"] == 1
    assert _reviews(db) == []  # the service misspoke, not the model: never a review item
    machine.enrich(MONDAY + timedelta(hours=2, minutes=30))
    assert [s["subject_id"] for s in _summaries(db)] == [first, second]


def test_enrich_budget_of_three_calls_defers_the_rest_to_the_next_run(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    deals = [machine.deal(name=f"Budget {n}") for n in range(5)]
    for deal in deals:
        machine.email(deal, BODY)
    machine.evaluate(MONDAY)
    machine.settings["enrich_budget_calls"] = 3
    result = machine.enrich(MONDAY + timedelta(minutes=30))
    assert len(machine.model_requests()) == 3
    assert _counts(machine, result)["deferred_by_budget"] == 2
    machine.enrich(MONDAY + timedelta(hours=1, minutes=30))
    assert len(machine.model_requests()) == 5
    assert sorted(s["subject_id"] for s in _summaries(db)) == sorted(deals)


def test_enrich_sends_no_email_address_phone_number_or_iban(machine: Machine) -> None:
    deal = machine.deal(name="Datenschutz KG (anna.schmidt@kunde.example, 0171 9876543)")
    machine.email(
        deal,
        "Hallo,\nbitte rufen Sie mich an: +49 30 1234567 oder 0171/9876543.\n"
        "Überweisung an DE89 3704 0044 0532 0130 00, Kopie an anna.schmidt@kunde.example.\n"
        "Gruß",
        fromAddress="anna.schmidt@kunde.example",
        subject="Rückruf bitte (anna.schmidt@kunde.example)",
    )
    machine.evaluate(MONDAY)
    machine.enrich(MONDAY + timedelta(minutes=30))
    [request] = machine.model_requests()
    sent = json.dumps(request, ensure_ascii=False)
    for secret in ("anna.schmidt", "1234567", "9876543", "DE89", "3704 0044", "kunde.example"):
        assert secret not in sent, secret
    for placeholder in ("[phone]", "[IBAN]", "[e-mail]"):
        assert placeholder in sent


def test_enrich_off_calls_no_model_and_a_task_carries_the_summary(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    deal = machine.deal(name="Weber und Co")
    machine.email(deal, BODY)
    machine.evaluate(MONDAY)
    machine.settings["enrich_enabled"] = False
    off = machine.enrich(MONDAY + timedelta(minutes=30))
    run = machine.instance.get_run_by_id(off.run_id)
    assert run is not None
    assert run.tags[OUTCOME_TAG] == "skipped"
    assert machine.model_requests() == []

    machine.settings["enrich_enabled"] = True
    machine.settings["dry_run"] = True  # writes nothing outside, but still asks the model
    machine.enrich(MONDAY + timedelta(minutes=45))
    [summary] = _summaries(db)
    machine.settings["dry_run"] = False
    machine.evaluate(MONDAY + timedelta(days=7))  # step 1 (business day 5) is due
    [task] = machine.tasks()
    text = task["description"]  # ClickUp keeps the markdown as the task's description
    assert summary["line1"] in text, text
    assert summary["line2"] in text, text
