"""The short simulation of ``make test``: five business days, 30 deals, chaos without the
Postgres outage (``make proof`` has the long one), on a real Postgres and the sandbox over HTTP.
Every invariant holds, none of them vacuously, and the chaos did hit."""

from __future__ import annotations

import pytest

from followup_pipeline.commands.simulate import summary
from followup_pipeline.simulation.invariants import Invariant
from followup_pipeline.simulation.runner import Options, Outcome, Simulation


@pytest.mark.slow
def test_simulation_five_days_of_chaos_keep_every_invariant(db_url: str) -> None:
    options = Options(days=5, deals=30, seed=1, chaos=True, outage=False, database_url=db_url)
    outcome = Simulation(options).run()
    text = "\n".join(summary(outcome))
    assert outcome.holds, text
    # Nothing held because nothing was looked at: each invariant checked something.
    assert all(invariant.checked > 0 for invariant in outcome.invariants), text
    # The chaos reached the machine: faults hit at several vendors, runs were killed for real
    # after a provider accepted, webhooks were lost or doubled.
    hit = {name for name, count in outcome.hit.items() if count}
    assert len(hit) >= 8, text
    assert any(name.startswith("run killed after") for name in hit), text
    assert outcome.runs["evaluate"] >= 50, text  # every business hour, and the settling ones
    assert outcome.runs["register"] > 0, text  # when the CRM's events were due


def test_simulation_summary_says_which_invariant_fails() -> None:
    broken = Invariant("no two tasks carry one key", False, 3, ("key task:7:1 on 2 tasks",))
    outcome = Outcome(
        options=Options(days=1, deals=1, seed=1, chaos=False),
        invariants=[Invariant("events processed", True, 5, ()), broken],
    )
    lines = summary(outcome)
    assert not outcome.holds
    assert any("FAILS" in line and "key task:7:1 on 2 tasks" in line for line in lines)
    assert lines[-1] == "AN INVARIANT FAILS"
