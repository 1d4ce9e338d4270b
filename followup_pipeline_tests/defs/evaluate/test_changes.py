"""evaluate in every hourly run: the full reconciliation (every deal in a watched stage listed,
compared with the open watches), and the activity since its cursor (e-mails, calls and meetings
changed), a handful of requests beside the listing's pages whatever the number of watches."""

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
    first = machine.evaluate(MONDAY)
    assert _counts(first)["crm_deals_watched_stages"] == 21
    assert _counts(first)["registered"] == 21
    # Between two runs the CRM changes, and no webhook arrives (the ingress is down).
    machine.sandbox_clock(MONDAY + timedelta(minutes=30))
    machine.move(won, "Closed Won")
    late = machine.deal(name="Entered an offer", stage="Prospecting")
    machine.move(late, "Proposal")
    before = _requests(machine)
    hourly = machine.evaluate(MONDAY + timedelta(hours=1))
    counts = _counts(hourly)
    assert counts["crm_deals_watched_stages"] == 21
    assert counts["closed_won"] == 1
    assert counts["registered"] == 1
    assert machine.watch(won)["closed_reason"] == "won"
    assert machine.watch(late)["closed_at"] is None
    # The stage names, one page of deals, the deal no longer listed, e-mails, calls and
    # meetings: six requests for 22 deals.
    assert _requests(machine) - before == 6
    assert all(machine.watch(deal)["closed_at"] is None for deal in quiet)


def test_changes_a_stage_change_that_leaves_modified_at_is_followed_by_the_next_run(
    machine: Machine,
) -> None:
    deal = machine.deal(name="Lost, modifiedAt untouched")
    machine.evaluate(MONDAY)
    # The stage changes, and modifiedAt says a day before the last run (an import, a clock
    # that is behind): a listing of changes since the cursor would not show it.
    machine.sandbox_clock(MONDAY - timedelta(days=1))
    machine.move(deal, "Closed Lost")
    machine.evaluate(MONDAY + timedelta(hours=1))
    assert machine.watch(deal)["closed_reason"] == "lost"


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


def test_changes_a_deleted_deal_is_closed_by_the_next_hourly_run(machine: Machine) -> None:
    deal = machine.deal(name="Deleted, webhook lost")
    machine.evaluate(MONDAY)
    machine.delete(deal)
    machine.evaluate(MONDAY + timedelta(hours=1))
    assert machine.watch(deal)["closed_reason"] == "subject_gone"


def test_changes_a_failed_listing_keeps_the_cursor(machine: Machine) -> None:
    deal = machine.deal(name="Offer")
    machine.evaluate(MONDAY)
    machine.delete(deal)
    machine.fault(vendor="espocrm", kind="error", status=500, path="/Opportunity$")
    failed = machine.evaluate(MONDAY + timedelta(hours=1))
    assert machine.outcome(failed) == "partial"
    assert machine.watch(deal)["closed_at"] is None  # the listing failed: nothing decided
    with machine.control() as control:
        control.delete("/faults").raise_for_status()
    cursor = machine.db.execute("SELECT position FROM job_cursors WHERE name = 'evaluate'")
    assert cursor.fetchone()["position"] == MONDAY  # not moved by a run that missed changes
    machine.evaluate(MONDAY + timedelta(hours=2))
    assert machine.watch(deal)["closed_reason"] == "subject_gone"


def test_changes_a_watch_opened_by_reconciliation_starts_when_the_deal_entered(
    machine: Machine,
) -> None:
    machine.evaluate(MONDAY - timedelta(days=7))  # the machine watches since a week before
    # The deal entered the offer stage on Friday evening; its webhook was lost.
    friday_evening = MONDAY - timedelta(days=3) + timedelta(hours=10)  # 19:00 in Berlin
    machine.sandbox_clock(friday_evening)
    deal = machine.deal(name="Friday's offer")
    machine.evaluate(MONDAY)
    watch = machine.watch(deal)
    assert (watch["base_on"], watch["registered_by"]) == (date(2026, 2, 27), "reconcile")
    # Business day 5 after Friday 27 February is Friday 6 March, not Monday's + 5.
    assert machine.steps(deal)[0]["due_on"] == date(2026, 3, 6)


def test_changes_activity_after_the_deal_entered_counts_for_a_watch_opened_late(
    machine: Machine,
) -> None:
    machine.evaluate(MONDAY - timedelta(days=7))
    # Entered on Wednesday evening, webhook lost; the salesperson e-mailed on Friday.
    machine.sandbox_clock(MONDAY - timedelta(days=5) + timedelta(hours=10))
    deal = machine.deal(name="Wednesday's offer")
    machine.sandbox_clock(MONDAY - timedelta(days=3) + timedelta(hours=2))
    machine.email(deal, "Here is the offer again.")
    machine.evaluate(MONDAY)
    watch = machine.watch(deal)
    assert watch["base_on"] == date(2026, 2, 25)
    assert watch["last_reset_at"] is not None  # Friday's e-mail came after it entered
    # Planned again from Friday 27 February: business day 5 is Friday 6 March (from Wednesday
    # it would have been Wednesday 4 March).
    assert machine.steps(deal)[0]["due_on"] == date(2026, 3, 6)


def test_changes_no_cadence_starts_before_the_machine_began_watching(machine: Machine) -> None:
    machine.sandbox_clock(MONDAY - timedelta(days=60))
    deal = machine.deal(name="In an offer stage long before")
    machine.evaluate(MONDAY)  # the machine's first run
    assert machine.watch(deal)["base_on"] == date(2026, 3, 2)


def test_changes_adopt_days_follows_deals_in_flight_from_when_they_entered(
    machine: Machine,
) -> None:
    machine.settings["adopt_days"] = 30
    machine.sandbox_clock(MONDAY - timedelta(days=14))  # two weeks in an offer stage
    recent = machine.deal(name="Entered two weeks ago")
    machine.sandbox_clock(MONDAY - timedelta(days=60))
    old = machine.deal(name="Entered two months ago")
    result = machine.evaluate(MONDAY)  # the machine's first run
    assert machine.watch(recent)["base_on"] == date(2026, 2, 16)
    assert machine.watch(old)["base_on"] == date(2026, 1, 31)  # not before the 30 days
    # Business day 5 after 16 February was 23 February: its task is created at once.
    [first, *_] = machine.steps(recent)
    assert first["due_on"] == date(2026, 2, 23)
    assert first["fired_at"] is not None
    assert result.output_for_node("evaluate_due")["fired"] >= 2
    cursor = machine.db.execute("SELECT position FROM job_cursors WHERE name = 'watching_since'")
    assert cursor.fetchone()["position"] == MONDAY - timedelta(days=30)


def test_changes_reconciliation_keeps_owner_names_and_amount_current(machine: Machine) -> None:
    deal = machine.deal(name="Owner GmbH", assignedUserId="u-ada", assignedUserName="Ada",
                        amount=1000, amountCurrency="EUR")  # fmt: skip
    machine.evaluate(MONDAY)
    watch = machine.watch(deal)
    assert (watch["assigned_user_id"], float(watch["amount"])) == ("u-ada", 1000.0)
    # Reassigned and re-priced in the CRM: the next hour's run copies it (the morning lists go
    # by the owner), with no step due.
    body = {"assignedUserId": "u-grace", "assignedUserName": "Grace", "amount": 2500.5,
            "name": "Owner GmbH – Rollout"}  # fmt: skip
    with machine.control() as control:
        control.patch(f"/deals/{deal}", json=body).raise_for_status()
    machine.evaluate(MONDAY + timedelta(hours=1))
    watch = machine.watch(deal)
    assert (watch["assigned_user_id"], watch["assigned_user_name"]) == ("u-grace", "Grace")
    assert (watch["subject_name"], float(watch["amount"])) == ("Owner GmbH – Rollout", 2500.5)
