"""The operator's and salesperson's small things (issue 47): a watch named by its deal's id
everywhere, ``watches list`` sorted with its owner, ``alerts list`` wrapped at words, ``report
send`` in one line, ``resume`` saying the new due dates, ``explain`` saying "not due until", task
names without the company twice, and ``leads list``/``leads show``. On the CLI and a real Postgres,
without Dagster but for ``report send``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.clock import build_clock
from followup_pipeline.commands.alerts import MESSAGE_LINES, WIDTH
from followup_pipeline.defs.report.window import current_window
from followup_pipeline.domain.explain import explain
from followup_pipeline.domain.tasks import Contact, TaskFacts, render_task, task_name
from followup_pipeline.store.lead_enrichment import Classified, store_classification
from followup_pipeline.store.leads import LeadRow, link_event

NOW = datetime.fromisoformat("2026-03-04T09:30:00+01:00")  # a Wednesday, in Berlin
TODAY = NOW.date()

CRM_LEAD = "6650c1b2c3d4e5f0b"

Cli = Callable[..., tuple[int, str]]


@pytest.fixture
def cli(db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """``followup`` on the test's database at an instant: its exit status and what it printed."""
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)

    def run(*argv: str, at: datetime = NOW) -> tuple[int, str]:
        monkeypatch.setenv("FOLLOWUP_NOW", at.isoformat())
        capsys.readouterr()
        status = main(list(argv))
        captured = capsys.readouterr()
        return status, captured.out + captured.err

    return run


def _watch(
    db: psycopg.Connection[Any],
    deal: str,
    name: str,
    dues: list[date | None],
    *,
    owner: str | None = None,
    account: str | None = None,
    closed: bool = False,
) -> int:
    """A watch of ``deal`` with a step per due day (None: a step fired already)."""
    row = db.execute(
        "INSERT INTO watches (subject_id, subject_name, account_name, assigned_user_name, stage,"
        " cadence_name, offsets, time_zone, base_on, registered_at, registered_by, closed_at,"
        " closed_reason)"
        " VALUES (%s, %s, %s, %s, 'Proposal', 'default', '{5,12,21}', 'Europe/Berlin', %s, %s,"
        " 'reconcile', %s, %s) RETURNING id",
        (
            deal,
            name,
            account,
            owner,
            TODAY - timedelta(days=14),
            NOW - timedelta(days=14),
            NOW - timedelta(days=1) if closed else None,
            "won" if closed else None,
        ),
    ).fetchone()
    assert row is not None
    for step_no, (offset, due) in enumerate(zip((5, 12, 21), dues, strict=False), start=1):
        fired = NOW - timedelta(days=3) if due is None else None
        db.execute(
            "INSERT INTO watch_steps (watch_id, step_no, offset_days, due_on, fired_at, task_ref)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (
                row["id"],
                step_no,
                offset,
                due or TODAY - timedelta(3),
                fired,
                "t1" if fired else None,
            ),
        )
    return int(row["id"])


def test_watches_show_takes_a_deal_id_or_a_watch_number(
    db: psycopg.Connection[Any], cli: Cli
) -> None:
    number = _watch(db, "6650a1b2c3d4e5f0a", "Crescent Analytics – Support", [TODAY])
    old = _watch(db, "7a50b1b2c3d4e5f99", "Won long ago", [TODAY], closed=True)

    status, by_deal = cli("watches", "show", "6650a1b2c3d4e5f0a")
    assert status == 0, by_deal
    assert f"{'id':>14}: {number}\n" in by_deal
    assert cli("watches", "show", str(number)) == (0, by_deal)
    # A deal's closed watch is shown too (its latest), as its number would show it.
    status, closed = cli("watches", "show", "7a50b1b2c3d4e5f99")
    assert status == 0
    assert f"{'id':>14}: {old}\n" in closed
    assert f"{'closed_reason':>14}: won\n" in closed
    status, out = cli("watches", "show", "0123456789abcdef0")
    assert status == 1
    assert "no watch of deal 0123456789abcdef0, and no watch 0123456789abcdef0" in out


def test_watches_list_is_sorted_by_next_due_then_name_with_the_owner(
    db: psycopg.Connection[Any], cli: Cli
) -> None:
    later = TODAY + timedelta(days=5)
    _watch(db, "d-late", "zeta later", [later], owner="Grace Lee")
    _watch(db, "d-none", "Alpha done", [None, None, None])  # nothing open: last
    _watch(db, "d-b", "Beta", [TODAY], owner="Ana Example")
    _watch(db, "d-a", "alpha", [TODAY], owner="Ole")
    _watch(db, "d-closed", "Aardvark", [TODAY], closed=True)

    status, out = cli("watches", "list")
    assert status == 0, out
    header, *rows, total = out.splitlines()
    assert "owner" in header
    assert total == "4 watch(es)"
    assert [row.split()[1] for row in rows] == ["d-a", "d-b", "d-late", "d-none"]
    assert ["Ole" in rows[0], "Ana Example" in rows[1], "Grace Lee" in rows[2]] == [True] * 3
    assert header.index("owner") == rows[1].index("Ana Example")  # a column of its own
    status, out = cli("watches", "list", "--all")
    assert out.splitlines()[-2].split()[1] == "d-closed"  # the closed after the open


def test_alerts_list_wraps_at_words(db: psycopg.Connection[Any], cli: Cli) -> None:
    words = [f"word{n:03d}" for n in range(80)]
    message = "ValueError: " + " ".join(words)
    db.execute(
        "INSERT INTO alerts (kind, source, fingerprint, subject, message, occurred_at)"
        " VALUES ('run_failure', 'run:1', 'f1', 'evaluate', %s, %s)",
        (message + "\nsecond line", NOW),
    )
    status, out = cli("alerts", "list")
    assert status == 0, out
    lines = out.splitlines()
    shown = lines[1 : 1 + MESSAGE_LINES]
    assert all(len(line) <= WIDTH for line in shown)
    assert all(line.startswith("       ") for line in shown)
    assert shown[-1].endswith(" …")
    text = " ".join(line.strip() for line in shown).removesuffix(" …").split()
    assert text == message.split()[: len(text)]  # whole words, in order, none cut
    assert len(text) > 160 // len("word000 ")  # more than the old 160 characters
    assert lines[-1] == "1 row(s) in 0 alert(s) recorded in the last 7 days (all: --all)"


def test_resume_prints_each_open_steps_new_due_date(db: psycopg.Connection[Any], cli: Cli) -> None:
    number = _watch(db, "6650a1b2c3d4e5f0a", "Crescent", [None, TODAY, TODAY + timedelta(7)])
    assert cli("watches", "pause", "6650a1b2c3d4e5f0a")[0] == 0
    status, out = cli("watches", "resume", "6650a1b2c3d4e5f0a", at=NOW + timedelta(days=7))
    assert status == 0, out
    steps = db.execute(
        "SELECT step_no, due_on FROM watch_steps WHERE watch_id = %s AND step_no > 1"
        " ORDER BY step_no",
        (number,),
    ).fetchall()
    assert out.splitlines() == [
        f"watch {number} resumed; its open steps are due:",
        f"  step 2: {steps[0]['due_on']} (was {TODAY})",
        f"  step 3: {steps[1]['due_on']} (was {TODAY + timedelta(7)})",
    ]
    [detail] = db.execute("SELECT detail FROM audit_log WHERE action = 'watch.resume'")
    assert f"step 2 on {steps[0]['due_on']} (was {TODAY})" in detail["detail"]


@dataclass(frozen=True)
class _Watch:
    id: int = 7
    subject_name: str = "Crescent"
    time_zone: str = "Europe/Berlin"
    paused_at: datetime | None = None
    closed_at: datetime | None = None
    closed_reason: str | None = None
    last_error: str | None = "espocrm: HTTP 503"


@dataclass(frozen=True)
class _Step:
    step_no: int
    due_on: date
    fired_at: datetime | None = None
    task_ref: str | None = None
    skipped_at: datetime | None = None
    skip_reason: str | None = None


def test_explain_says_not_due_until_for_a_step_not_due_whatever_the_crm_said() -> None:
    def headline(due_on: date) -> str:
        lines = explain(
            deal_id="d1",
            watch=_Watch(),
            steps=[_Step(1, due_on)],
            actions={},
            today=TODAY,
            watched_stages=["Proposal"],
        )
        return lines[0]

    later = TODAY + timedelta(days=2)
    assert headline(later) == (
        f"deal d1 (Crescent), watch 7: no task today — step 1 is not due until {later} "
        "(meanwhile the CRM's last answer was an error: espocrm: HTTP 503)."
    )
    assert headline(TODAY).endswith(
        "no task yet — step 1 is due, waiting on a CRM error: espocrm: HTTP 503"
    )


def _facts(deal: str, account: str | None) -> TaskFacts:
    return TaskFacts(
        deal_name=deal,
        account_name=account,
        crm_url=None,
        stage="Proposal",
        amount=None,
        currency=None,
        step_no=1,
        step_count=3,
        due_on=TODAY,
        today=TODAY,
        contact=Contact("none", TODAY),
        summary=None,
    )


def test_task_names_leave_out_a_company_the_deal_name_holds() -> None:
    title = render_task(_facts("Crescent Analytics – Support", "Crescent Analytics"), "en").name
    assert title == "Follow up: Crescent Analytics – Support — step 1 of 3"
    assert task_name("CRESCENT analytics – Support", "Crescent Analytics") == (
        "CRESCENT analytics – Support"
    )
    assert task_name("Support renewal", "Crescent Analytics") == (
        "Support renewal (Crescent Analytics)"
    )
    assert task_name("Support renewal", " \n") == "Support renewal"
    assert task_name("Support renewal", None) == "Support renewal"


def _lead_event(
    db: psycopg.Connection[Any], n: int, lead: LeadRow, intent: str | None, priority: int = 2
) -> int:
    """A source event linked to its lead, classified as ``intent`` (None: not classified)."""
    event = db.execute(
        "INSERT INTO events (source, dedup_key, body) VALUES (%s, %s, '') RETURNING id",
        (lead.source, f"k{n}"),
    ).fetchone()
    assert event is not None
    with db.transaction():
        linked = link_event(db, event_id=event["id"], lead=lead)
    if intent is not None:
        classified = Classified(
            event_id=event["id"],
            lead_id=linked.lead_id,
            segment="mid_market",
            intent=intent,
            priority=priority,
            summary=f"Wants to {intent}.",
            language="en",
            reasons=["asked for a price", "team of 40"],
            model="mistral-small",
            source="model",
        )
        assert store_classification(db, classified, now=lead.at)
    return linked.lead_id


def test_leads_list_has_intent_priority_and_crm_id_and_show_has_events(
    db: psycopg.Connection[Any], cli: Cli
) -> None:
    ana = "ana@example.com"
    first = LeadRow(ana, "site-form", "form", NOW - timedelta(days=2), name="Ana", page="/price",
                    message="Do you do " + "discounts for teams " * 30)  # fmt: skip
    lead = _lead_event(db, 1, first, "question", priority=3)
    paid = LeadRow(ana, "payment", "payment", NOW - timedelta(days=1), amount=Decimal("49.00"),
                   currency="EUR", amount_unit="major", crm_lead_id=CRM_LEAD)  # fmt: skip
    _lead_event(db, 2, paid, "buy", priority=1)
    _lead_event(db, 3, LeadRow(ana, "crm-changes", "crm", NOW), None)  # its newest: unclassified
    _lead_event(db, 4, LeadRow("bo@example.com", "site-form", "form", NOW - timedelta(3)), None)

    status, out = cli("leads", "list")
    assert status == 0, out
    header, ana_row, bo_row, total = out.splitlines()
    assert re.search(r"\bintent\s+prio\s+CRM id\b", header)
    # What the CRM's Lead shows: the newest classified event's intent and priority.
    assert re.search(rf"\bbuy\s+1\s+{CRM_LEAD}\b", ana_row), ana_row
    assert re.search(r"site-form\s+—\s+—\s+—\s", bo_row), bo_row
    assert total == "2 lead(s)"

    status, out = cli("leads", "show", str(lead))
    assert status == 0, out
    assert f"        lead: {lead}: {ana}" in out
    assert f"    CRM Lead: {CRM_LEAD}\n" in out
    assert "3 event(s), oldest first:" in out
    assert "site-form, form, page /price" in out
    assert f"payment, payment, amount 49.00 EUR, CRM Lead {CRM_LEAD}\n" in out
    assert "classified: priority 3, intent question, segment mid_market, language en" in out
    assert "classified: priority 1, intent buy" in out
    assert "      - asked for a price" in out
    assert out.count("not classified") == 1
    message = next(line for line in out.splitlines() if "message:" in line)
    assert message.removesuffix("…").split()[-1] in {"discounts", "for", "teams"}  # at a word
    assert len(message) < 330
    assert cli("leads", "show", "999") == (1, "followup: no lead 999 (`followup leads list`)\n")


def test_report_send_prints_one_line(
    on_sandbox: str, db: psycopg.Connection[Any], capfd: pytest.CaptureFixture[str]
) -> None:
    window = current_window("morning", build_clock(None).now(), "Europe/Berlin")
    _watch(db, "d1", "Seed GmbH", [date.fromisoformat(window)])
    assert main(["report", "send", "morning"]) == 0
    out, err = capfd.readouterr()
    [line] = out.splitlines()
    assert line.startswith(f"morning_report {window}: 1 sent as report:morning:{window}")
    assert "(the run is not recorded in Dagster: no instance at" in line  # no machine here
    assert "dagster" not in err.lower(), err
