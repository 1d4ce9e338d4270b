"""Poison events: malformed items are recorded and skipped, one bad event never stops another,
and a run that dies charges only the event it was working on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.engine import work
from followup_pipeline.integrations.espocrm_models import Deal, DealListing
from followup_pipeline.settings import Settings
from followup_pipeline.store.db import lost_connection, storable
from followup_pipeline.store.dead_letters import requeue_events
from followup_pipeline_tests.support import registering

from .conftest import EventFactory, FakeCrm


def _event(db: psycopg.Connection[Any], event_id: int) -> dict[str, Any]:
    row = db.execute("SELECT * FROM events WHERE id = %s", (event_id,)).fetchone()
    assert row is not None
    return dict(row)


def test_poison_items_are_recorded_and_skipped_while_good_events_register(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    good = [
        add_event(
            [{"id": f"good{n}", "name": f"Offer {n}", "stage": "Proposal"}], "Opportunity.create"
        )
        for n in range(3)
    ]
    poison = add_event(
        [
            {"id": "a\u0000b", "name": "NUL in the id", "stage": "Proposal"},
            {"id": "x" * 3000, "name": "A huge id", "stage": "Proposal"},
            {"id": "fine1", "name": "Next to the poison", "stage": "Proposal"},
        ],
        "Opportunity.create",
    )
    counts = dict(registering(db, crm, settings).run())
    assert counts["registered"] == 4  # three good events and the good item beside the poison
    assert counts["items_invalid"] == 2
    assert "events_retried" not in counts
    assert "events_dead" not in counts
    watched = [row["subject_id"] for row in db.execute("SELECT subject_id FROM watches")]
    assert sorted(watched) == ["fine1", "good0", "good1", "good2"]
    for event_id in [*good, poison]:
        assert (_event(db, event_id)["status"], _event(db, event_id)["attempts"]) == ("done", 1)
    skipped = [f for f in work.failures(db, settings) if f.subject.startswith(f"event:{poison}/")]
    assert [(f.step, f.error) for f in skipped] == [
        ("0:invalid", "id 'a\\x00b' is not up to 64 of A-Z a-z 0-9 _ -"),
        ("1:invalid", f"id {storable(repr('x' * 3000), 80)} is not up to 64 of A-Z a-z 0-9 _ -"),
    ]
    # A replay finds the records and skips the poison again; nothing is doubled.
    db.execute("UPDATE events SET status = 'dead' WHERE id = %s", (poison,))
    assert requeue_events(db, [poison]) == ([poison], {})
    again = dict(registering(db, crm, settings).run(ids=[poison]))
    assert again["items_already_done"] == 1
    assert again["items_invalid"] == 2
    assert db.execute("SELECT count(*) AS n FROM watches").fetchone() == {"n": 4}


def test_poison_dead_letters_command_lists_the_skipped_items(
    db: psycopg.Connection[Any],
    db_url: str,
    crm: FakeCrm,
    settings: Settings,
    add_event: EventFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    poison = add_event([{"id": "bad id!", "stage": "Proposal"}], "Opportunity.create")
    registering(db, crm, settings).run()
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    assert main(["dead-letters", "list"]) == 0
    out = capsys.readouterr().out
    assert f"event:{poison}" in out
    assert "at step 0:invalid" in out
    assert "is not up to 64 of A-Z a-z 0-9 _ -" in out


def test_poison_a_statement_the_database_refuses_fails_its_event_not_the_run(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    # An index whose row for one name is too large: Postgres refuses that INSERT with 54000,
    # which psycopg raises as OperationalError although the connection is fine.
    db.execute(
        "CREATE FUNCTION probe_wide(t text) RETURNS text IMMUTABLE LANGUAGE sql AS $$"
        " SELECT CASE WHEN t LIKE 'Poison%' THEN"
        " (SELECT string_agg(md5(t || g::text), '') FROM generate_series(1, 400) g)"
        " ELSE t END $$"
    )
    db.execute("CREATE INDEX watches_probe_wide ON watches (probe_wide(subject_name))")
    poison = add_event([{"id": "p1", "name": "Poison", "stage": "Proposal"}], "Opportunity.create")
    good = add_event([{"id": "g1", "name": "Good", "stage": "Proposal"}], "Opportunity.create")
    counts = dict(registering(db, crm, settings).run())
    assert (counts["registered"], counts["events_retried"], counts["events_done"]) == (1, 1, 1)
    assert _event(db, good)["status"] == "done"
    failed = _event(db, poison)
    assert (failed["status"], failed["attempts"], failed["dead_step"]) == ("pending", 1, "0:open")
    assert "index row" in failed["last_error"]


def test_poison_lost_connection_is_told_from_a_refused_statement(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE probe (t text)")
        conn.execute("CREATE INDEX probe_t ON probe (t)")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("INSERT INTO probe VALUES (%s)", (repr(list(range(3000))) * 3,))
        assert not lost_connection(refused.value, conn)
        with pytest.raises(psycopg.DataError) as nul:
            conn.execute("SELECT %s::text", ("a\x00b",))
        assert not lost_connection(nul.value, conn)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert pid is not None
        with psycopg.connect(db_url, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (pid[0],))
        with pytest.raises(psycopg.OperationalError) as gone:
            conn.execute("SELECT 1")
        assert lost_connection(gone.value, conn)


def test_poison_storable_text_has_no_nul_nor_lone_surrogate_and_is_bounded() -> None:
    text = storable("a\x00b\ud800c" + "z" * 5000, 100)
    assert "\x00" not in text
    text.encode("utf-8")  # no lone surrogate left
    assert text.startswith("ab\ufffdc")
    assert len(text) == 100


class _Dies(FakeCrm):
    """A CRM read during which the worker dies (a SIGKILL, as far as the run can tell)."""

    def list_deals_by_ids(self, *, ids: Sequence[str]) -> DealListing:
        raise SystemExit("killed")

    def get_deal(self, *, deal_id: str) -> Deal:
        raise SystemExit("killed")


def test_poison_a_run_that_dies_charges_only_the_event_it_worked_on(
    db: psycopg.Connection[Any], settings: Settings, add_event: EventFactory
) -> None:
    first, second, third = (add_event([{"id": f"d{n}", "stage": "Proposal"}]) for n in range(3))
    with pytest.raises(SystemExit):
        registering(db, _Dies(), settings).run()
    attempts = [_event(db, e)["attempts"] for e in (first, second, third)]
    assert attempts == [1, 0, 0]


def test_poison_an_event_that_kills_every_run_is_a_dead_letter_at_its_limit(
    db: psycopg.Connection[Any], crm: FakeCrm, settings: Settings, add_event: EventFactory
) -> None:
    killer = add_event([{"id": "d0", "stage": "Proposal"}])
    crm.add("d1", name="Behind it")
    behind = add_event([{"id": "d1", "stage": "Proposal"}])
    for _ in range(settings.event_max_attempts):
        with pytest.raises(SystemExit):
            registering(db, _Dies(), settings).run()
        db.execute("UPDATE events SET claimed_until = NULL")  # the dead run's lease ran out
    counts = dict(registering(db, crm, settings).run())
    dead = _event(db, killer)
    assert (dead["status"], dead["attempts"], dead["dead_step"]) == (
        "dead",
        settings.event_max_attempts,
        "worker_died",
    )
    assert _event(db, behind)["status"] == "done"
    assert counts["registered"] == 1
