"""One Settings reaches schedules and ops alike; the named cadence row plans new watches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from followup_pipeline.cli import main
from followup_pipeline.defs import build_definitions, evaluate

from .conftest import MONDAY, Machine


def test_build_dotenv_zone_reaches_schedules_and_ops_alike(machine: Machine) -> None:
    # The working folder of every test is its own (conftest): this .env is the one read.
    Path(".env").write_text("FOLLOWUP_TIMEZONE=America/New_York\n")
    settings = machine.loaded_settings()
    defs = build_definitions(settings)
    schedule = defs.get_repository_def().get_schedule_def("evaluate_business_hours")
    assert schedule.execution_timezone == "America/New_York"
    deal = machine.deal()
    job = machine.job(evaluate, "evaluate", machine.resources(MONDAY), settings)
    job.execute_in_process(instance=machine.instance)
    assert machine.watch(deal)["time_zone"] == "America/New_York"


def test_build_new_watches_follow_the_named_cadence_row(
    machine: Machine, db: psycopg.Connection[Any]
) -> None:
    db.execute("INSERT INTO cadences (name, offsets) VALUES ('brisk', '{2,4}')")
    machine.settings["cadence_name"] = "brisk"
    deal = machine.deal()
    machine.evaluate(MONDAY)
    assert machine.watch(deal)["cadence_name"] == "brisk"
    assert [s["offset_days"] for s in machine.steps(deal)] == [2, 4]


def test_build_configured_cadence_is_written_at_start_and_plans_watches(
    machine: Machine, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    monkeypatch.setenv("FOLLOWUP_CADENCE_NAME", "brisk")
    monkeypatch.setenv("FOLLOWUP_CADENCE", "3,6")
    assert main(["migrate"]) == 0  # what followup dev does at every start
    assert db.execute("SELECT offsets FROM cadences WHERE name = 'brisk'").fetchone() == {
        "offsets": [3, 6]
    }
    machine.settings.update(cadence_name="brisk", cadence=[9, 10])  # a run never writes the row
    deal = machine.deal()
    machine.evaluate(MONDAY)
    assert [s["offset_days"] for s in machine.steps(deal)] == [3, 6]


def test_build_unknown_cadence_fails_the_run_naming_the_setting(machine: Machine) -> None:
    machine.settings["cadence_name"] = "nowhere"
    machine.deal()
    result = machine.evaluate(MONDAY, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "FOLLOWUP_CADENCE_NAME" in str(failure.event_specific_data)
