"""``followup account``: a due step left undone past its grace is unaccounted, named, and fails
the command; once fired it is done. The real job on real Postgres, the sandbox over HTTP."""

from __future__ import annotations

from datetime import timedelta

import pytest

from followup_pipeline.cli import main

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


def test_account_a_step_undone_past_its_grace_is_unaccounted_and_named(
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
    # The next evaluate fires it: done, and nothing is unaccounted.
    machine.evaluate(MONDAY.replace(hour=6) + timedelta(days=7, hours=4))
    code, out = _account(
        machine,
        monkeypatch,
        capsys,
        hours=4,
    )
    assert code == 0, out
    step_line = next(line for line in out.splitlines() if line.startswith("deal_followup  step"))
    assert step_line.split()[2:4] == ["1", "1"], out  # due 1, done 1
