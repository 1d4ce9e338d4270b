"""``followup account``: a due step left undone past its grace is unaccounted, named, and fails
the command; late while the CRM is down, it waits with its owner; a person's decision skips it.
The real job on real Postgres, the sandbox over HTTP."""

from __future__ import annotations

from datetime import timedelta

import pytest

from followup_pipeline.cli import main
from followup_pipeline.defs.alerts.checks import work_signals
from followup_pipeline.store import work as work_store

from .conftest import MONDAY, Machine


def _account(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    hours: float,
) -> tuple[int, str]:  # fmt: skip
    """``followup account --since 2d`` at ``hours`` past the step's working day's start."""
    # Step 1 of a deal first seen on Monday is due on the fifth business day, from 07:00.
    due = MONDAY.replace(hour=6) + timedelta(days=7)  # Monday 9 March, 07:00 in Berlin
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", machine.db_url)
    monkeypatch.setenv("FOLLOWUP_NOW", (due + timedelta(hours=hours)).isoformat())
    capsys.readouterr()
    code = main(["account", "--since", "2d", "--pipeline", "deal_followup"])
    return code, capsys.readouterr().out


def test_account_a_step_undone_past_its_grace_is_unaccounted_then_owned_then_decided(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deal = machine.deal(name="Alpha")
    machine.evaluate(MONDAY)
    watch = machine.watch(deal)
    name = f"task:{watch['id']}:1"
    # No evaluate ran on its day: two hours in it is not late yet, four hours in it is lost.
    code, out = _account(machine, monkeypatch, capsys, hours=2)
    assert code == 0, out
    assert "unaccounted: 0" in out
    code, out = _account(machine, monkeypatch, capsys, hours=4)
    assert code == 1, out
    assert "unaccounted (1)" in out
    assert f"deal_followup step {name}: due 2026-03-09 07:00" in out
    # The CRM is down when evaluate comes: late means owned, the step waits on the list of
    # work with the operations owner (none set here: it says so), and is accounted for.
    machine.fault(vendor="espocrm", kind="error", status=503)
    machine.evaluate(MONDAY.replace(hour=6) + timedelta(days=7, hours=4))
    code, out = _account(machine, monkeypatch, capsys, hours=4)
    assert code == 0, out
    assert "waiting, deal_followup step: nobody: set FOLLOWUP_OPS_OWNER 1" in out, out
    # Its alert, when it is mailed (the alert checks hold it while evaluate ends partial: the
    # outage's own alert names it): one a window for all the late steps.
    _, [late] = work_signals(work_store.to_alert(machine.db))
    assert (late.kind, late.fingerprint) == ("catch_up", "queue:deal_followup:step")
    assert late.subject == f"late follow-up: step 1 of deal {deal}"
    assert "followup work list --pipeline deal_followup --kind step" in late.message
    # A person decides it is done with: the step is skipped, "decided", and no run fires it.
    with machine.control() as control:
        control.delete("/faults").raise_for_status()
    capsys.readouterr()
    step = f"step:{watch['id']}:1"
    assert main(["work", "close", step, "--by", "Ops", "--reason", "called"]) == 0
    machine.evaluate(MONDAY.replace(hour=6) + timedelta(days=7, hours=5))
    assert machine.tasks() == []
    code, out = _account(machine, monkeypatch, capsys, hours=5)
    assert code == 0, out
    step_line = next(line for line in out.splitlines() if line.startswith("deal_followup  step"))
    assert "suppressed, deal_followup step: decided 1" in out, out
    assert step_line.split()[2:5] == ["1", "0", "1"], out  # due 1, done 0, suppressed 1
