"""Tasks a salesperson acts on, kept up to date: their text in the team's language on a seeded
week (snapshots), written again once when a summary arrives, and one open task per deal (a task
superseded by the next step's, or overtaken by activity, is closed in ClickUp with a comment,
once, whatever retries and crashes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from .conftest import MONDAY, SANDBOX, Machine

#: The seeded week's instants (UTC; Berlin is an hour ahead in March).
TUESDAY = datetime(2026, 3, 3, 10, 0, tzinfo=UTC)
THURSDAY_NEXT = datetime(2026, 3, 12, 8, 0, tzinfo=UTC)
STEP_ONE = MONDAY + timedelta(days=7)  # Monday 9 March: step 1 of an untouched deal is due
STEP_TWO = MONDAY + timedelta(days=16)  # Wednesday 18 March: step 2 is due


def _comments(machine: Machine, task_id: str) -> list[str]:
    return [c["comment_text"] for c in machine.comments().get(task_id, [])]


def _task(machine: Machine, task_id: str) -> dict[str, Any]:
    [task] = [t for t in machine.tasks() if t["id"] == task_id]
    return task


def _closes(machine: Machine) -> list[tuple[str, str, object]]:
    return [
        (a["idempotency_key"], a["outcome"], a["payload"].get("reason"))
        for a in machine.actions()
        if a["kind"] == "close_task"
    ]


def _summary(machine: Machine, deal: str, input_hash: str, line1: str, line2: str) -> None:
    """A summary arrives (what ``enrich`` stores), after the deal's task was created."""
    machine.db.execute(
        "INSERT INTO enrichments (subject_id, input_hash, line1, line2, model)"
        " VALUES (%s, %s, %s, %s, 'm')",
        (deal, input_hash, line1, line2),
    )


def _close_in_clickup(machine: Machine, task_id: str) -> None:
    """The salesperson closes the task in ClickUp."""
    with httpx.Client(base_url=f"{machine.sandbox}/clickup/api", timeout=10) as clickup:
        answer = clickup.put(
            f"/v2/task/{task_id}",
            json={"status": "complete"},
            headers={"Authorization": SANDBOX.clickup_token.get_secret_value()},
        )
        answer.raise_for_status()


EXPECTED = {
    "de": (
        "Nachfassen: Rollout Lager Nord (Müller & Söhne GmbH) — Schritt 1 von 3",
        "**Aufgabe:** Bei Müller \\& Söhne GmbH nachfragen, ob das Angebot angekommen ist und ob"
        " es Fragen dazu gibt. Danach den Anruf oder die E-Mail am Deal im CRM erfassen; damit"
        " beginnt die Nachverfolgung neu.\n"
        "**Warum jetzt:** Schritt 1 von 3, überfällig seit 10. März. Letzter Kontakt vor 9 Tagen:"
        " E-Mail am 3. März.\n"
        "\n"
        "**Deal:** Rollout Lager Nord\n"
        "**Firma:** Müller \\& Söhne GmbH\n"
        "**Phase:** Proposal\n"
        "**Betrag:** 48.500,00 EUR\n"
        "**Im CRM:** [Rollout Lager Nord]({crm})",
        "\n\n**Letzte E-Mails:**\n"
        "> Kunde prüft das Angebot intern.\n"
        "> Rückfrage zum Liefertermin offen.",
    ),
    "en": (
        "Follow up: Rollout Lager Nord (Müller & Söhne GmbH) — step 1 of 3",
        "**Next step:** Ask Müller \\& Söhne GmbH whether the offer arrived and whether they have"
        " questions about it. Then log the call or e-mail on the deal in the CRM; that starts the"
        " follow-up again.\n"
        "**Why now:** Step 1 of 3, overdue since 10 March. Last contact 9 days ago: e-mail on"
        " 3 March.\n"
        "\n"
        "**Deal:** Rollout Lager Nord\n"
        "**Account:** Müller \\& Söhne GmbH\n"
        "**Stage:** Proposal\n"
        "**Amount:** 48,500.00 EUR\n"
        "**In the CRM:** [Rollout Lager Nord]({crm})",
        "\n\n**Latest e-mails:**\n"
        "> Kunde prüft das Angebot intern.\n"
        "> Rückfrage zum Liefertermin offen.",
    ),
}


@pytest.mark.parametrize("language", ["de", "en"])
def test_tasks_snapshot_of_a_seeded_week_with_a_reset_an_overdue_step_and_a_late_summary(
    machine: Machine, language: str
) -> None:
    machine.settings.update(report_language=language, clickup_user_map={"crm-ada": 42})
    deal = machine.deal(
        name="Rollout Lager Nord",
        accountName="Müller & Söhne GmbH",
        amount=48500,
        amountCurrency="EUR",
        assignedUserId="crm-ada",
    )
    machine.evaluate(MONDAY)  # the watch opens: steps due 9, 18 and 31 March
    machine.sandbox_clock(TUESDAY)
    machine.email(deal, "Danke für das Angebot.", dateSent="2026-03-03 10:00:00")
    machine.evaluate(TUESDAY + timedelta(hours=1))  # the e-mail resets the cadence: step 1 on 10th
    # No run until Thursday (an outage): step 1 is two days overdue, and enrich has not run.
    machine.evaluate(THURSDAY_NEXT)
    [task] = machine.tasks()
    name, body, summary = EXPECTED[language]
    crm = f"{machine.sandbox}/espocrm/#Opportunity/view/{deal}"
    assert (task["name"], task["description"]) == (name, body.format(crm=crm))
    assert [a["id"] for a in task["assignees"]] == [42]  # through the user map
    assert machine.watch(deal)["last_reset_kind"] == "email"
    # The step keeps the task's own address, as ClickUp's answer gave it (the mails link it).
    fired = machine.db.execute(
        "SELECT task_ref, task_url FROM watch_steps WHERE task_ref IS NOT NULL"
    ).fetchall()
    assert fired == [{"task_ref": task["id"], "task_url": task["url"]}]
    assert task["url"] == f"{machine.sandbox}/clickup/t/{task['id']}"

    # The summary arrives afterwards: the open task is written again, once.
    _summary(machine, deal, "f" * 64, "Kunde prüft das Angebot intern.", "Rückfrage zum "
             "Liefertermin offen.")  # fmt: skip
    result = machine.evaluate(THURSDAY_NEXT + timedelta(hours=1))
    machine.evaluate(THURSDAY_NEXT + timedelta(hours=2))
    [task] = machine.tasks()
    assert (task["name"], task["description"]) == (name, body.format(crm=crm) + summary)
    watch = machine.watch(deal)["id"]
    updates = [(a["idempotency_key"], a["outcome"]) for a in machine.actions()
               if a["kind"] == "task_update"]  # fmt: skip
    assert updates == [(f"task_update:{watch}:1:{'f' * 12}", "confirmed")]
    assert result.output_for_node("evaluate_due")["tasks_updated"] == 1


def test_tasks_each_newer_summary_updates_the_open_task_once_through_the_ledger(
    machine: Machine,
) -> None:
    deal = machine.deal(name="Late summaries")
    machine.evaluate(MONDAY)
    machine.evaluate(STEP_ONE)
    [task] = machine.tasks()
    assert "Letzte E-Mails" not in task["description"]
    _summary(machine, deal, "a1", "Erste Zeile.", "Zweite Zeile.")
    machine.settings["dry_run"] = True  # a dry run writes nothing to ClickUp, records it once
    machine.evaluate(STEP_ONE + timedelta(hours=1))
    machine.evaluate(STEP_ONE + timedelta(hours=2))
    assert "Erste Zeile." not in machine.tasks()[0]["description"]
    machine.settings["dry_run"] = False
    _summary(machine, deal, "b2", "Neuere Zeile.", "Noch eine.")
    for hour in (3, 4):
        machine.evaluate(STEP_ONE + timedelta(hours=hour))
    [task] = machine.tasks()
    assert "> Neuere Zeile.\n> Noch eine." in task["description"]
    watch = machine.watch(deal)["id"]
    updates = [
        (a["idempotency_key"], a["outcome"], a["reason"], a["attempts"])
        for a in machine.actions()
        if a["kind"] == "task_update"
    ]
    assert updates == [
        (f"task_update:{watch}:1:a1", "suppressed", "dry_run", 0),
        (f"task_update:{watch}:1:b2", "confirmed", None, 1),
    ]
    assert machine.steps(deal)[0]["task_summary"] == "b2"


def test_tasks_a_task_superseded_by_the_next_steps_is_closed_with_a_comment(
    machine: Machine,
) -> None:
    machine.settings["report_language"] = "en"
    deal = machine.deal(name="Two steps")
    machine.evaluate(MONDAY)
    machine.evaluate(STEP_ONE)
    [first] = machine.tasks()
    result = machine.evaluate(STEP_TWO)
    machine.evaluate(STEP_TWO + timedelta(hours=1))  # a later run closes nothing twice
    second = next(t for t in machine.tasks() if t["id"] != first["id"])
    assert _task(machine, first["id"])["status"]["type"] == "closed"
    assert second["status"]["type"] == "open"  # one open task per deal: the newest
    assert _comments(machine, first["id"]) == [
        "Closed by Followup: step 2 of 3 is due now and has a task of its own."
    ]
    assert _comments(machine, second["id"]) == []
    watch = machine.watch(deal)["id"]
    assert _closes(machine) == [(f"close_task:{watch}:1", "confirmed", "superseded")]
    assert result.output_for_node("evaluate_due")["tasks_closed_superseded"] == 1


@pytest.mark.parametrize(
    ("activity", "item", "said"),
    [
        ("emails", {"dateSent": "2026-03-10 09:00:00"}, "E-Mail am 10. März"),
        ("calls", {"dateStart": "2026-03-10 09:00:00", "status": "Held"}, "Anruf am 10. März"),
        ("meetings", {"dateStart": "2026-03-10 09:00:00", "status": "Held"}, "Termin am 10. März"),
    ],
)
def test_tasks_a_task_overtaken_by_activity_is_closed_saying_what_happened(
    machine: Machine, activity: str, item: dict[str, str], said: str
) -> None:
    deal = machine.deal(name="Followed up")
    machine.evaluate(MONDAY)
    machine.evaluate(STEP_ONE)
    [task] = machine.tasks()
    machine.sandbox_clock(datetime(2026, 3, 10, 9, 0, tzinfo=UTC))
    with machine.control() as control:
        control.post(f"/deals/{deal}/{activity}", json=item).raise_for_status()
    machine.evaluate(datetime(2026, 3, 10, 10, 0, tzinfo=UTC))
    machine.evaluate(datetime(2026, 3, 10, 11, 0, tzinfo=UTC))
    assert _task(machine, task["id"])["status"]["type"] == "closed"
    assert _comments(machine, task["id"]) == [
        f"Von Followup geschlossen: Es gab Kontakt ({said}); die Nachverfolgung beginnt von dort "
        "neu."
    ]
    watch = machine.watch(deal)
    assert _closes(machine) == [(f"close_task:{watch['id']}:1", "confirmed", "contact")]
    assert machine.steps(deal)[0]["overtaken_at"] is not None


def test_tasks_the_next_task_after_a_reset_names_the_contact(machine: Machine) -> None:
    deal = machine.deal(name="After the call")
    machine.evaluate(MONDAY)
    machine.sandbox_clock(TUESDAY)
    with machine.control() as control:
        call = {"dateStart": "2026-03-03 10:00:00", "status": "Held"}
        control.post(f"/deals/{deal}/calls", json=call).raise_for_status()
    machine.evaluate(TUESDAY + timedelta(hours=1))
    due_on = machine.steps(deal)[0]["due_on"]
    machine.evaluate(datetime.combine(due_on, MONDAY.timetz()))
    [task] = machine.tasks()
    assert "Letzter Kontakt vor 7 Tagen: Anruf am 3. März." in task["description"]


def test_tasks_a_lost_comment_answer_is_settled_without_a_second_comment(
    machine: Machine,
) -> None:
    deal = machine.deal(name="Flaky comments")
    machine.evaluate(MONDAY)
    machine.evaluate(STEP_ONE)
    [first] = machine.tasks()
    # ClickUp adds the comment and the answer is lost: the close is failed, not done.
    machine.fault(vendor="clickup", kind="drop_answer", method="POST", path="/comment$", count=1)
    crashed = machine.evaluate(STEP_TWO)
    assert machine.outcome(crashed) == "partial"
    watch = machine.watch(deal)["id"]
    key = f"close_task:{watch}:1"
    assert _closes(machine) == [(key, "failed", "superseded")]
    machine.evaluate(STEP_TWO + timedelta(hours=1))  # the retry finds the task closed, commented
    assert len(_comments(machine, first["id"])) == 1
    [close] = [a for a in machine.actions() if a["idempotency_key"] == key]
    assert (close["outcome"], close["attempts"]) == ("confirmed", 2)

    # A run that died between ClickUp's answer and its commit left the row attempted: the
    # next run settles it by looking, and comments nothing twice.
    machine.db.execute(
        "UPDATE actions SET outcome = 'attempted' WHERE idempotency_key = %s", (key,)
    )
    machine.evaluate(STEP_TWO + timedelta(hours=2))
    assert len(_comments(machine, first["id"])) == 1
    [close] = [a for a in machine.actions() if a["idempotency_key"] == key]
    assert (close["outcome"], close["attempts"]) == ("confirmed", 3)


def test_tasks_a_comment_that_failed_after_the_close_is_added_by_the_retry(
    machine: Machine,
) -> None:
    machine.deal(name="Comment refused")
    machine.evaluate(MONDAY)
    machine.evaluate(STEP_ONE)
    [first] = machine.tasks()
    # The status change goes through; ClickUp refuses the comment (nothing added).
    machine.fault(vendor="clickup", kind="error", status=400, method="POST", path="/comment$",
                  count=1)  # fmt: skip
    machine.evaluate(STEP_TWO)
    assert _task(machine, first["id"])["status"]["type"] == "closed"
    assert _comments(machine, first["id"]) == []
    machine.evaluate(STEP_TWO + timedelta(hours=1))
    assert _comments(machine, first["id"]) == [
        "Von Followup geschlossen: Schritt 2 von 3 ist jetzt fällig und hat eine eigene Aufgabe."
    ]


def test_tasks_a_task_the_salesperson_closed_counts_as_closed(machine: Machine) -> None:
    deal = machine.deal(name="Done by hand")
    machine.evaluate(MONDAY)
    machine.evaluate(STEP_ONE)
    [first] = machine.tasks()
    _close_in_clickup(machine, first["id"])
    machine.evaluate(STEP_TWO)
    assert _comments(machine, first["id"]) == []  # nothing to say to a task someone closed
    watch = machine.watch(deal)["id"]
    [close] = [a for a in machine.actions() if a["kind"] == "close_task"]
    assert (close["idempotency_key"], close["outcome"], close["last_error"]) == (
        f"close_task:{watch}:1",
        "confirmed",
        "closed in ClickUp already",
    )
