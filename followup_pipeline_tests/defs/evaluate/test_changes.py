"""evaluate follows the changes: after the day's first run (a full reconciliation), an hourly run
asks the CRM only for what changed since its cursor (deals modified, e-mails created, calls and
meetings modified), a handful of requests whatever the number of watches."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import httpx

from .conftest import MONDAY, Machine


def _requests(machine: Machine) -> int:
    with httpx.Client(base_url=f"{machine.sandbox}/_sandbox", timeout=5) as control:
        stats = control.get("/stats").json()["requests"]
    return int(sum(stats.get("espocrm", {}).values()))


def _counts(result: Any) -> dict[str, Any]:
    return dict(result.output_for_node("evaluate_due"))


def test_changes_a_stage_change_without_webhook_is_followed_by_the_next_hourly_run(
    machine: Machine,
) -> None:
    machine.sandbox_clock(MONDAY - timedelta(days=7))  # the deals are a week old
    won = machine.deal(name="Will be won")
    quiet = [machine.deal(name=f"Quiet {n}") for n in range(20)]
    first = machine.evaluate(MONDAY)  # the day's first run: every deal in a watched stage
    assert _counts(first)["full_reconciliation"] == 1
    assert _counts(first)["registered"] == 21
    # Between two runs the CRM changes, and no webhook arrives (the ingress is down).
    machine.sandbox_clock(MONDAY + timedelta(minutes=30))
    machine.move(won, "Closed Won")
    late = machine.deal(name="Entered an offer", stage="Prospecting")
    machine.move(late, "Proposal")
    before = _requests(machine)
    hourly = machine.evaluate(MONDAY + timedelta(hours=1))
    counts = _counts(hourly)
    assert "full_reconciliation" not in counts
    assert counts["crm_deals_changed"] == 2
    assert counts["closed_won"] == 1
    assert counts["registered"] == 1
    assert machine.watch(won)["closed_reason"] == "won"
    assert machine.watch(late)["closed_at"] is None
    # The stage names, the changed deals, e-mails, calls and meetings: five requests for 21
    # watches (it was three a watch).
    assert _requests(machine) - before == 5
    assert all(machine.watch(deal)["closed_at"] is None for deal in quiet)


def test_changes_a_held_meeting_entered_late_resets_the_cadence(machine: Machine) -> None:
    deal = machine.deal(name="Met them")
    machine.evaluate(MONDAY)
    assert machine.steps(deal)[0]["due_on"] == date(2026, 3, 9)
    machine.evaluate(MONDAY + timedelta(hours=1))  # the cursor moves on
    # Thursday: someone records Wednesday's meeting, held, a day late.
    machine.sandbox_clock(MONDAY + timedelta(days=3, hours=1))
    with machine.control() as control:
        control.post(
            f"/deals/{deal}/meetings",
            json={"name": "Demo", "status": "Held", "dateStart": "2026-03-04 13:00:00"},
        ).raise_for_status()
    result = machine.evaluate(MONDAY + timedelta(days=3, hours=2))
    assert _counts(result)["reset"] == 1
    # Planned again from Wednesday: business day 5 after it is the next Wednesday.
    assert machine.steps(deal)[0]["due_on"] == date(2026, 3, 11)


def test_changes_a_deleted_deal_is_found_by_the_next_days_full_run(machine: Machine) -> None:
    deal = machine.deal(name="Deleted, webhook lost")
    machine.evaluate(MONDAY)
    machine.delete(deal)
    machine.evaluate(MONDAY + timedelta(hours=1))
    assert machine.watch(deal)["closed_at"] is None  # not listed as changed: not seen yet
    tuesday = machine.evaluate(MONDAY + timedelta(days=1))
    assert _counts(tuesday)["full_reconciliation"] == 1
    assert machine.watch(deal)["closed_reason"] == "subject_gone"


def test_changes_full_on_demand_and_a_failed_listing_keeps_the_cursor(machine: Machine) -> None:
    deal = machine.deal(name="Offer")
    machine.evaluate(MONDAY)
    machine.delete(deal)
    machine.fault(vendor="espocrm", kind="error", status=500, path="/Opportunity$")
    failed = machine.evaluate(MONDAY + timedelta(hours=1))
    assert machine.outcome(failed) == "partial"
    with machine.control() as control:
        control.delete("/faults").raise_for_status()
    cursor = machine.db.execute("SELECT position FROM job_cursors WHERE name = 'evaluate'")
    assert cursor.fetchone()["position"] == MONDAY  # not moved by a run that missed changes
    forced = machine.evaluate(
        MONDAY + timedelta(hours=2),
        run_config={"ops": {"sync": {"config": {"full": True}}}},
    )
    assert _counts(forced)["full_reconciliation"] == 1
    assert machine.watch(deal)["closed_reason"] == "subject_gone"
