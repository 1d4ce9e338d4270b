"""Lead intake's mode: a fresh installation starts in shadow (a day of leads writes nothing to the
CRM), ``followup leads go-live`` (audited, showing the last comparison, confirmed) makes the next
run write; an installation with live CRM writes on record stays live after the upgrade."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.commands.doctor import lead_mode_check
from followup_pipeline.defs import build_definitions
from followup_pipeline.defs.lead_intake import MODE_TAG
from followup_pipeline.defs.lead_intake.upsert import CrmUpserter
from followup_pipeline.domain.crm_lead import LeadFacts, wanted_attributes
from followup_pipeline.engine.effects import ActionSpec
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.engine.worker import WorkerRun
from followup_pipeline.integrations.espocrm_leads import EspoLeadWriter
from followup_pipeline.resources import PostgresResource
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.settings import load_settings
from followup_pipeline.store import events, lead_mode, leads
from followup_pipeline.store.db import connect
from followup_pipeline.store.migrate import migrate
from followup_pipeline_tests.defs.lead_intake.test_crm_upsert import _crm_leads, _writes
from followup_pipeline_tests.defs.lead_intake.test_intake import _form, _intake, _store

#: The migration before the mode moved into the database.
BEFORE_THE_MODE = 21


def _intake_run(db_url: str, sandbox: str) -> tuple[dict[str, Any], str]:
    """One ``lead_intake`` run on default settings (the mode as on record): its counts and its
    mode tag."""
    key = SandboxConfig().pdl_api_key.get_secret_value()
    defs = build_definitions(load_settings(company_lookup_api_key=key, event_backoff_base_s=0))
    with dg.instance_for_test() as instance:
        result = _intake(defs, db_url, sandbox, instance)
        run = instance.get_run_by_id(result.run_id)
    assert run is not None
    counts: dict[str, Any] = result.output_for_node("normalise_leads")
    return counts, run.tags[MODE_TAG]


def _the_machine(monkeypatch: pytest.MonkeyPatch, db_url: str, sandbox: str, home: Path) -> None:
    """The commands' view: this database, and the sandbox's CRM as ``followup dev`` writes it."""
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    monkeypatch.setenv("FOLLOWUP_HOME", str(home))
    key = SandboxConfig().espocrm_api_key.get_secret_value()
    (home / "sandbox.env").write_text(
        f"FOLLOWUP_ESPOCRM_URL={sandbox}/espocrm\nFOLLOWUP_ESPOCRM_API_KEY={key}\n"
    )


def test_lead_mode_a_fresh_installation_shadows_until_a_person_goes_live(
    db: psycopg.Connection[Any],
    db_url: str,
    sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    before = _writes(sandbox)
    _store(db, "site-form", _form("eve@shadow-day.example", name="Eve Stein"), "day-1")
    counts, mode = _intake_run(db_url, sandbox)
    assert (mode, counts["crm_shadow"]) == ("shadow", 1)
    assert _writes(sandbox) == before  # a shadow day writes nothing to the CRM
    assert _crm_leads(sandbox, "eve@shadow-day.example") == []

    _the_machine(monkeypatch, db_url, sandbox, tmp_path)
    assert main(["leads", "mode"]) == 0
    assert "lead intake: shadow (since " in capsys.readouterr().out
    assert main(["leads", "compare", "--since", "2020-01-01", "--by", "Ana"]) == 0
    capsys.readouterr()
    # No one to answer here (pytest's stdin is no terminal): refused without --yes.
    assert main(["leads", "go-live", "--by", "Ana"]) == 1
    assert "not switched" in capsys.readouterr().out
    assert main(["leads", "go-live", "--yes", "--by", "Ana", "--reason", "compare agrees"]) == 0
    said = capsys.readouterr().out
    compared = "1 lead(s) since 2020-01-01: 0 as the pipeline has it, 1 different, 0 unread"
    assert f"by Ana: {compared} (in shadow)" in said
    assert said.rstrip().splitlines()[-1].startswith("lead intake: live (since ")
    (entry,) = db.execute(
        "SELECT actor, detail, reason FROM audit_log WHERE action = 'leads.go_live'"
    ).fetchall()
    assert (entry["actor"], entry["reason"]) == ("Ana", "compare agrees")
    assert entry["detail"].startswith("shadow → live; the last comparison")
    assert compared in entry["detail"]

    # The next run writes: the same person's next event makes their CRM Lead.
    _store(db, "site-form", _form("eve@shadow-day.example", name="Eve Stein"), "day-2")
    counts, mode = _intake_run(db_url, sandbox)
    assert (mode, counts["crm_created"]) == ("live", 1)
    assert [lead["name"] for lead in _crm_leads(sandbox, "eve@shadow-day.example")] == ["Eve Stein"]
    assert main(["leads", "shadow", "--by", "Ana", "--reason", "old automation back"]) == 0
    assert lead_mode.in_force(db, load_settings()).mode == "shadow"


@pytest.mark.parametrize(
    ("outcomes", "after"),
    [
        (["suppressed", "accepted"], "live"),  # its newest write was live
        (["accepted", "suppressed"], "shadow"),  # it had gone back to shadow
    ],
)
def test_lead_mode_an_installation_that_wrote_leads_stays_live_after_the_upgrade(
    outcomes: list[str], after: str, database_factory: Callable[..., str]
) -> None:
    url = database_factory()
    migrate(url, target=BEFORE_THE_MODE)
    with connect(url, autocommit=True) as conn:
        for number, outcome in enumerate(outcomes):
            conn.execute(
                "INSERT INTO actions (idempotency_key, kind, due_at, time_zone, outcome, reason)"
                " VALUES (%s, 'crm_lead', now(), 'UTC', %s, %s)",
                (
                    f"lead:{number}:crm_upsert",
                    outcome,
                    "shadow" if outcome == "suppressed" else None,
                ),
            )
    migrate(url)
    with connect(url, autocommit=True) as conn:
        record = lead_mode.recorded(conn, seed="shadow")
        audited = conn.execute(
            "SELECT actor FROM audit_log WHERE subject = 'lead-intake'"
        ).fetchall()
    assert record.mode == after
    if after == "live":
        assert record.changed_by == lead_mode.UPGRADE_BY
        assert [row["actor"] for row in audited] == [lead_mode.UPGRADE_BY]
    else:
        assert audited == []


def test_lead_mode_the_demo_goes_live_on_its_sandbox_and_not_on_real_vendors(
    db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    settings = load_settings(home=tmp_path)
    said = lead_mode.at_start(db, settings, sandbox=True)
    assert said.startswith("lead intake: live, each lead is written to the sandbox's CRM")
    assert lead_mode.recorded(db, seed="shadow").changed_by == lead_mode.DEMO_BY
    # The same home started later on real vendors: the demo's live mode does not carry over.
    said = lead_mode.at_start(db, settings, sandbox=False)
    assert said.startswith("lead intake: shadow, nothing is written to the CRM")
    # A person's choice stands: their live is kept on real vendors, their shadow on the sandbox.
    lead_mode.switch(db, "live", by="Ana", settings=settings)
    assert lead_mode.at_start(db, settings, sandbox=False).startswith("lead intake: live")
    lead_mode.switch(db, "shadow", by="Ana", settings=settings)
    assert lead_mode.at_start(db, settings, sandbox=True).startswith("lead intake: shadow")
    assert lead_mode.switch(db, "shadow", by="Bo", settings=settings) is None  # no-op, unaudited
    actors = [r["actor"] for r in db.execute("SELECT actor FROM audit_log ORDER BY id")]
    assert actors == [lead_mode.DEMO_BY, "the start with real vendors", "Ana", "Ana"]
    # doctor: the setting set to another mode than the one on record is a warning.
    assert lead_mode_check(db, load_settings(lead_intake_mode="live")).line().startswith("WARN")
    assert lead_mode_check(db, settings).line().startswith("ok")


#: A live write's answer was lost before the switch to shadow. What the CRM shows of the person
#: at the step's search, then at the engine's look-up (None: it cannot say, a 503) → the
#: action's outcome and the run's count.
LOST_IN_SHADOW: dict[str, tuple[bool, bool | None, str, str]] = {
    "the lost create made it": (True, True, "accepted", "crm_unchanged"),
    "it did not take effect": (False, False, "suppressed", "crm_shadow"),
    "the CRM cannot say now": (False, None, "unknown", "crm_skipped_lost_answer_left_for_live"),
}


@pytest.mark.parametrize(("before", "after", "outcome", "count"), LOST_IN_SHADOW.values(),
                         ids=LOST_IN_SHADOW)  # fmt: skip
def test_lead_mode_shadow_settles_a_lost_live_write_by_a_search_or_leaves_it_for_live(
    db: psycopg.Connection[Any],
    db_url: str,
    before: bool,
    after: bool | None,
    outcome: str,
    count: str,
) -> None:
    settings = load_settings(lead_intake_mode="shadow", action_in_flight_s=0)
    stored = _store(db, "site-form", _form("lost@example.com", name="Ada Lovelace"), "x1")
    with db.transaction():
        row = leads.LeadRow(email="lost@example.com", source="site-form", kind="form",
                            at=datetime.now(UTC), name="Ada Lovelace")  # fmt: skip
        lead_id = leads.link_event(db, event_id=stored.event_id, lead=row).lead_id
    facts = LeadFacts(email="lost@example.com", name="Ada Lovelace", first_source="site-form")
    crm_lead = {"id": "L1", **wanted_attributes(facts, None, settings.lead_crm_fields, ())}
    postgres = PostgresResource(url=db_url)
    scope = RunScope(datetime.now(UTC), "run-1", logging.getLogger("test.lead_mode"))
    spec = ActionSpec(key=f"lead:{stored.event_id}:crm_upsert", kind="crm_lead",
                      due_at=scope.now, time_zone="UTC")  # fmt: skip
    live = ActionLedger(postgres, scope, in_flight_s=0, max_attempts=9)
    attempt = live.begin(spec)
    assert attempt is not None
    live.fail(attempt, "HTTP 502 after the create was sent", maybe_done=True)
    searches: list[bool | None] = [before, after]

    def crm(request: httpx.Request) -> httpx.Response:
        assert request.method == "GET", "shadow mode writes nothing"
        shows = searches[0] if len(searches) == 1 else searches.pop(0)
        if shows is None:
            return httpx.Response(503, json={"message": "down"})
        return httpx.Response(200, json={"total": 1, "list": [crm_lead]} if shows else {"list": []})

    writer = EspoLeadWriter("http://crm.test", "k", transport=httpx.MockTransport(crm),
                            sleep=lambda _: None)  # fmt: skip
    counts: Counter[str] = Counter()
    with connect(db_url) as work:
        with work.transaction():
            event = events.event_by_id(work, stored.event_id)
        assert event is not None
        upserter = CrmUpserter(WorkerRun(work, postgres, scope, settings), writer, counts)
        assert upserter.run(event, lead_id, now=scope.now)
    action = db.execute("SELECT outcome FROM actions WHERE idempotency_key = %s", (spec.key,))
    assert action.fetchone() == {"outcome": outcome}
    assert counts == {count: 1}
    assert db.execute("SELECT status FROM events").fetchone() == {"status": "done"}
