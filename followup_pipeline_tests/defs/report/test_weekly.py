"""The Friday overview end to end: real Postgres, the sandbox's Graph, once per week."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import psycopg

from followup_pipeline.defs import report

from ..evaluate.conftest import MONDAY, Machine

FRIDAY_AFTERNOON = MONDAY + timedelta(days=11, hours=6)  # Friday 13 March 2026, 15:00 Berlin
TUESDAY = MONDAY + timedelta(days=8)  # 10 March, in the overview's week (6 to 13 March)
KINDS = {"site-form": "form", "payment": "payment", "crm-changes": "crm"}


def _weekly(machine: Machine, friday: str, **config: Any) -> Any:
    job = machine.job(report, "weekly_report", machine.resources(FRIDAY_AFTERNOON))
    run_config = {"ops": {"send_weekly_overview": {"config": config}}}
    return job.execute_in_process(
        instance=machine.instance, partition_key=friday, run_config=run_config
    )


def _lead(db: psycopg.Connection[Any], email: str, first_seen: datetime) -> int:
    row = db.execute(
        "INSERT INTO leads (email, first_source, first_seen_at, last_seen_at)"
        " VALUES (%s, 'site-form', %s, %s) RETURNING id",
        (email, first_seen, first_seen),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def _lead_event(
    db: psycopg.Connection[Any],
    lead_id: int | None,
    source: str,
    at: datetime,
    *,
    priority: int | None = None,
    dead_step: str | None = None,
) -> int:
    """A stored event of ``source`` (done, or dead at ``dead_step``), its lead event when it
    made a lead, and its classification when it has a ``priority``."""
    row = db.execute(
        "INSERT INTO events (source, dedup_key, body, received_at, status, dead_step,"
        " last_error, processed_at) VALUES (%s, gen_random_uuid()::text, '\\x7b7d', %s, %s,"
        " %s, %s, %s) RETURNING id",
        (source, at, "dead" if dead_step else "done", dead_step, dead_step and "boom", at),
    ).fetchone()
    assert row is not None
    event_id = int(row["id"])
    if lead_id is not None:
        db.execute(
            "INSERT INTO lead_events (lead_id, event_id, source, kind, received_at)"
            " VALUES (%s, %s, %s, %s, %s)",
            (lead_id, event_id, source, KINDS[source], at),
        )
    if priority is not None:
        db.execute(
            "INSERT INTO lead_classifications (event_id, lead_id, segment, intent, priority,"
            " summary, language, reasons, model, source, created_at)"
            " VALUES (%s, %s, 'smb', 'demo', %s, 'Wants a demo.', 'de', '{}', 'm', 'model', %s)",
            (event_id, lead_id, priority, at + timedelta(minutes=1)),
        )
    return event_id


def _review_item(
    db: psycopg.Connection[Any], event_id: int, at: datetime, *, resolved: bool = False
) -> None:
    db.execute(
        "INSERT INTO review_items (subject_type, subject_id, input_hash, model, raw_output, error,"
        " created_at, resolved_at, resolution)"
        " VALUES ('LeadEvent', %s, 'h', 'm', '{}', 'lead.v2', %s, %s, %s)",
        (str(event_id), at, at if resolved else None, "rejected" if resolved else None),
    )


def _crm_lead(
    db: psycopg.Connection[Any], event_id: int, at: datetime, outcome: str, reason: str | None
) -> None:
    db.execute(
        "INSERT INTO actions (idempotency_key, kind, due_at, time_zone, outcome, reason,"
        " created_at, updated_at) VALUES (%s, 'crm_lead', %s, 'Europe/Berlin', %s, %s, %s, %s)",
        (f"lead:{event_id}:crm_upsert", at, outcome, reason, at, at),
    )


def _lead_section(text: str) -> str:
    """The lead section of the overview's text part ('' without one)."""
    _, found, rest = text.partition("\nLeads\n")
    return found.lstrip("\n") + rest.partition("\n\n")[0] if found else ""


def test_weekly_overview_counts_the_weeks_leads(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    ada = _lead(db, "ada@example.org", MONDAY)  # a person of the week before
    old = _lead_event(db, ada, "site-form", MONDAY, priority=3)
    _review_item(db, old, MONDAY, resolved=True)
    _crm_lead(db, old, MONDAY, "accepted", None)
    paid = _lead_event(db, ada, "payment", TUESDAY, priority=1)
    _crm_lead(db, paid, TUESDAY, "suppressed", "shadow")
    bob = _lead(db, "bob@example.org", TUESDAY)
    _crm_lead(db, _lead_event(db, bob, "site-form", TUESDAY, priority=2), TUESDAY, "accepted", None)
    wednesday = TUESDAY + timedelta(days=1)
    cem = _lead(db, "cem@example.org", wednesday)
    _review_item(db, _lead_event(db, cem, "site-form", wednesday), wednesday)  # it failed lead.v2
    dan = _lead(db, "dan@example.org", wednesday)
    _lead_event(db, dan, "site-form", wednesday, dead_step="0:enrich")  # the lookup is down
    _lead_event(db, None, "espocrm", wednesday, dead_step="deal")  # a deal's: not a lead's

    assert _weekly(machine, "2026-03-13").success
    [mail] = machine.outbox()
    html, text = mail["message"]["body"]["content"], mail["message"]["textBody"]
    assert _lead_section(text).splitlines() == [
        "Leads",
        "Leads received: 4",
        "Leads received: website form: 3",
        "Leads received: payment: 1",
        "Leads received: priority 1: 1",
        "Leads received: priority 2: 1",
        "Leads received: not classified: 2",
        "New people: 3",
        "Written to the CRM: 1",
        "Not written to the CRM (shadow mode): 1",
        "Classification waiting for a review by the operations team: 1",
        "Stuck, waiting for the operations team: 1",
        "Stuck at: company lookup: 1",
    ]
    for what, n in [
        ("Leads received", 4),
        ("Leads received: website form", 3),
        ("Leads received: not classified", 2),
        ("New people", 3),
        ("Written to the CRM", 1),
        (r"Not written to the CRM \(shadow mode\)", 1),
        ("Classification waiting for a review by the operations team", 1),
        ("Stuck at: company lookup", 1),
    ]:
        assert re.search(rf'>{what}</td><td align="right"[^>]*>{n}<', html), what
    assert "dead" not in (html + text).lower()  # no word from the machine's insides


def test_weekly_overview_leads_section_is_left_out_or_one_line(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    # Lead intake has never taken in a lead: a team with deals only sees no lead section.
    assert _weekly(machine, "2026-03-13").success
    text = machine.outbox()[-1]["message"]["textBody"]
    assert _lead_section(text) == ""
    assert "No leads" not in text
    # Leads came the week before, none this week, nothing waits: one line says so.
    ada = _lead(db, "ada@example.org", MONDAY)
    _lead_event(db, ada, "site-form", MONDAY, priority=2)
    assert _weekly(machine, "2026-03-13", force=True).success
    message = machine.outbox()[-1]["message"]
    assert _lead_section(message["textBody"]).splitlines() == [
        "Leads",
        "No leads this week, and none waits for the operations team.",
    ]
    assert (
        "<p>No leads this week, and none waits for the operations team.</p>"
        in (message["body"]["content"])
    )


def test_weekly_overview_counts_the_week_and_goes_out_once(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    deals = [machine.deal(name=f"Woche {n}", amount=1000 * (n + 1), amountCurrency="EUR")
             for n in range(3)]  # fmt: skip
    machine.evaluate(MONDAY)  # three watches opened in the week before
    machine.evaluate(MONDAY + timedelta(days=7))  # Monday 9 March: three tasks
    machine.move(deals[0], "Closed Won")
    machine.evaluate(MONDAY + timedelta(days=8))  # Tuesday: one watch closed, won

    result = _weekly(machine, "2026-03-13")
    assert result.success
    [mail] = machine.outbox()
    message = mail["message"]
    assert message["subject"] == "Weekly overview 2026-03-07 – 2026-03-13"
    html = message["body"]["content"]
    assert re.search(r'Tasks created</td><td align="right"[^>]*>3<', html)
    assert re.search(r'Deals no longer followed up: won</td><td align="right"[^>]*>1<', html)
    assert re.search(r'Proposal</td><td align="right"[^>]*>2<', html)  # two deals still open
    assert html.count('bgcolor="#4a7bd0"') == 20  # all three tasks on one day: the full bar
    # The week's deals by name, read from the watches: the won one with its amount, the open
    # ones' value by salesperson, the quietest.
    text = message["textBody"]
    assert "Won (1)\n* Woche 0 (Unassigned), 1,000 EUR, on 10 March" in text
    assert "* Unassigned: 2 deals, 5,000 EUR" in text
    assert "Longest without contact\n* Woche" in text
    assert _weekly(machine, "2026-03-13").success
    assert len(machine.outbox()) == 1
    assert _weekly(machine, "2026-03-13", force=True).success
    assert len(machine.outbox()) == 2
    previous = _weekly(machine, "2026-03-06")  # a backfilled week says it is late
    assert previous.success
    assert machine.outbox()[-1]["message"]["subject"].startswith("late: Weekly overview")


def test_weekly_figures_agree_and_the_chart_has_business_days_only(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    from followup_pipeline.defs.report.gather import weekly_data
    from followup_pipeline.settings import Settings

    for n in range(3):
        machine.deal(name=f"Alter {n}")
    machine.evaluate(MONDAY)
    # All opened the evening before their base date (the old average counted hours since
    # registration, the oldest whole days: an average of 24.0 beside an oldest of 23).
    db.execute("UPDATE watches SET registered_at = registered_at - interval '20 hours'")
    settings = Settings(database_url=machine.db_url, report_language="de")
    data = weekly_data(db, settings, FRIDAY_AFTERNOON.date(), FRIDAY_AFTERNOON, None)
    [stage] = data.open_by_stage
    assert stage.count == 3
    assert stage.average_age_days == stage.oldest_age_days == 11  # 2 to 13 March
    # Opened on different days: the average lies between, the oldest is the oldest.
    db.execute("UPDATE watches SET base_on = base_on - (id % 3)::int * 4")
    data = weekly_data(db, settings, FRIDAY_AFTERNOON.date(), FRIDAY_AFTERNOON, None)
    [stage] = data.open_by_stage
    assert (stage.average_age_days, stage.oldest_age_days) == (15.0, 19)
    # Monday to Friday: no Saturday or Sunday in the chart.
    assert [d.weekday() for d in data.tasks_per_day] == [0, 1, 2, 3, 4]
