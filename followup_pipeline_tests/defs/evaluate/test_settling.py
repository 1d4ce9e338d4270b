"""evaluate settles what may exist before skipping, and never fires a step unverified."""

from __future__ import annotations

from datetime import timedelta

from .conftest import MONDAY, Machine


def _lose_the_answer_of_step_one(machine: Machine, name: str) -> str:
    deal = machine.deal(name=name)
    machine.evaluate(MONDAY)
    machine.fault(vendor="clickup", kind="drop_answer", method="POST", count=1)
    machine.evaluate(MONDAY + timedelta(days=7))  # ClickUp created it; the row says unknown
    assert len(machine.tasks()) == 1
    return deal


def test_settling_lost_answer_then_catch_up_keeps_one_task(machine: Machine) -> None:
    deal = _lose_the_answer_of_step_one(machine, "Lost answer")
    machine.evaluate(MONDAY + timedelta(days=16))  # step 2 is due as well now
    [task] = machine.tasks()
    first, second, third = machine.steps(deal)
    assert first["task_ref"] == task["id"]
    assert second["skip_reason"] == "superseded"
    assert third["fired_at"] is None
    assert third["skipped_at"] is None


def test_settling_lost_answer_then_won_closes_the_task(machine: Machine) -> None:
    deal = _lose_the_answer_of_step_one(machine, "Lost answer, won")
    machine.move(deal, "Closed Won")
    machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    machine.evaluate(MONDAY + timedelta(days=7, hours=2))
    assert machine.watch(deal)["closed_reason"] == "won"
    [task] = machine.tasks()
    assert (task["status"]["status"], task["status"]["type"]) == ("complete", "closed")


def test_settling_recheck_close_skips_every_open_step(machine: Machine) -> None:
    deal = machine.deal(name="Won at the re-check")
    machine.evaluate(MONDAY)
    machine.evaluate(MONDAY + timedelta(days=7))  # step 1 fired
    machine.move(deal, "Closed Won")
    # The listing fails this run, so only the re-check of the due step sees the win.
    machine.fault(vendor="espocrm", kind="error", status=500, path="Opportunity$", method="GET")
    machine.evaluate(MONDAY + timedelta(days=16))
    assert machine.watch(deal)["closed_reason"] == "won"
    steps = machine.steps(deal)
    assert steps[0]["fired_at"] is not None
    assert [s["skip_reason"] for s in steps[1:]] == ["deal_closed", "deal_closed"]


def test_settling_unreadable_activity_holds_the_step_back(machine: Machine) -> None:
    deal = machine.deal(name="Busy")
    machine.evaluate(MONDAY)
    with machine.control() as control:
        control.post(f"/deals/{deal}/emails", json={"dateSent": "2026-03-09 07:30:00"})
    # The activity listing (one for all deals) fails: no reset can be known, the step waits.
    machine.fault(vendor="espocrm", kind="error", status=500, path="/Email$")
    result = machine.evaluate(MONDAY + timedelta(days=7))
    assert machine.outcome(result) == "partial"
    assert machine.steps(deal)[0]["fired_at"] is None
    assert machine.watch(deal)["last_error"]
    with machine.control() as control:
        control.delete("/faults").raise_for_status()
    machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    step = machine.steps(deal)[0]
    assert step["fired_at"] is None  # the e-mail of that morning postponed it
    assert str(step["due_on"]) == "2026-03-16"
    assert machine.watch(deal)["last_error"] is None


def test_settling_task_follows_the_deal_as_it_is_now(machine: Machine) -> None:
    deal = machine.deal(name="Old name", assignedUserId="crm-ada")
    machine.settings.update(clickup_user_map={"crm-ada": 1, "crm-bob": 2})
    machine.evaluate(MONDAY)
    with machine.control() as control:
        control.patch(f"/deals/{deal}", json={"name": "New name", "assignedUserId": "crm-bob"})
    machine.evaluate(MONDAY + timedelta(days=7))
    [task] = machine.tasks()
    assert "New name" in task["name"]
    assert [a["id"] for a in task["assignees"]] == [2]
    assert machine.watch(deal)["subject_name"] == "New name"


def test_settling_closing_a_deleted_task_counts_as_closed(machine: Machine) -> None:
    deal = machine.deal(name="Task deleted by hand")
    machine.evaluate(MONDAY)
    machine.evaluate(MONDAY + timedelta(days=7))
    machine.move(deal, "Closed Lost")
    machine.fault(vendor="clickup", kind="error", status=404, method="PUT")
    first = machine.evaluate(MONDAY + timedelta(days=7, hours=1))
    second = machine.evaluate(MONDAY + timedelta(days=7, hours=2))
    closes = [a for a in machine.actions() if a["kind"] == "close_task"]
    assert [(a["outcome"], a["attempts"]) for a in closes] == [("confirmed", 1)]
    assert "no longer exists" in closes[0]["last_error"]
    assert machine.outcome(first) == "ok"
    assert machine.outcome(second) == "ok"
