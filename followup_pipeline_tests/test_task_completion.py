"""A task completed in ClickUp as the salesperson's follow-up
(``FOLLOWUP_CLICKUP_COMPLETION_RESETS``): with the setting on, a step's task that a person
completes resets the cadence exactly as an e-mail does, its evidence kept in
``task_completions``; off, nothing changes; a task Followup closed itself is no one's follow-up;
a completion is applied once; a ClickUp that cannot be read leaves the run partial and the cursor
where it was. The real ``evaluate`` job on a real Postgres, the sandbox over HTTP; the client's
paging against ``httpx.MockTransport``."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from followup_pipeline.domain.tasks import (
    Language,
    TaskFacts,
    close_comment,
    contact_of,
    render_task,
)
from followup_pipeline.integrations.clickup import ClickUpClient

from .defs.evaluate.conftest import MONDAY, SANDBOX, Machine

STEP_ONE = MONDAY + timedelta(days=7)  # Monday 9 March: step 1 of an untouched deal is due
STEP_TWO = MONDAY + timedelta(days=16)  # Wednesday 18 March: step 2 is due
#: Tuesday 10 March, 10:00 in Berlin: the salesperson completes the task (or e-mails).
DONE_AT = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)
AN_HOUR = timedelta(hours=1)


@pytest.fixture
def machine(db_url: str, sandbox: str, db: psycopg.Connection[Any]) -> Machine:
    """The ``evaluate`` harness on a fresh database and a reset sandbox with no deals."""
    with httpx.Client(base_url=sandbox, timeout=5) as control:
        control.post("/_sandbox/reset", json={"demo": False}).raise_for_status()
    return Machine(db_url=db_url, sandbox=sandbox, db=db)


def _counts(result: Any) -> dict[str, Any]:
    return dict(result.output_for_node("evaluate_due"))


def _clickup() -> httpx.Client:
    return httpx.Client(
        headers={"Authorization": SANDBOX.clickup_token.get_secret_value()}, timeout=10
    )


def _complete(machine: Machine, task_id: str, at: datetime) -> None:
    """A person completes the task in ClickUp at ``at`` (ClickUp's clock), as its UI does: the
    status set to the list's closed status by ``PUT /v2/task/{id}``."""
    machine.sandbox_clock(at)
    with _clickup() as clickup:
        url = f"{machine.sandbox}/clickup/api/v2/task/{task_id}"
        clickup.put(url, json={"status": "complete"}).raise_for_status()


def _task(machine: Machine, task_id: str) -> dict[str, Any]:
    [task] = [t for t in machine.tasks() if t["id"] == task_id]
    return task


def _comments(machine: Machine, task_id: str) -> list[str]:
    return [c["comment_text"] for c in machine.comments().get(task_id, [])]


def _evidence(machine: Machine) -> list[dict[str, Any]]:
    return list(machine.db.execute("SELECT * FROM task_completions ORDER BY id").fetchall())


def _due(machine: Machine, deal: str) -> list[date]:
    return [step["due_on"] for step in machine.steps(deal)]


def _fired(machine: Machine, *names: str) -> list[str]:
    """Deals ``names`` watched from Monday 2 March, step 1 fired on the 9th: their deal ids."""
    machine.sandbox_clock(MONDAY - AN_HOUR)
    deals = [machine.deal(name=name) for name in names]
    machine.evaluate(MONDAY)
    machine.sandbox_clock(STEP_ONE)
    machine.evaluate(STEP_ONE)
    return deals


def _task_of(machine: Machine, deal: str, step_no: int = 1) -> str:
    ref = machine.steps(deal)[step_no - 1]["task_ref"]
    assert isinstance(ref, str)
    return ref


def test_task_completion_resets_the_cadence_like_an_email(machine: Machine) -> None:
    machine.settings["clickup_completion_resets"] = True
    completed, emailed = _fired(machine, "Completed in ClickUp", "E-mailed")
    before = _due(machine, completed)
    task = _task_of(machine, completed)
    _complete(machine, task, DONE_AT)
    machine.email(emailed, "Wie besprochen.", dateSent="2026-03-10 09:00:00")
    result = machine.evaluate(DONE_AT + AN_HOUR)
    counts = _counts(result)
    assert (counts["reset"], counts["tasks_completed_in_clickup"]) == (2, 1)
    assert machine.outcome(result) == "ok"

    # Planned again from Tuesday 10 March, step for step as the e-mail's deal.
    assert _due(machine, completed) == _due(machine, emailed) != before
    assert _due(machine, completed)[1] == date(2026, 3, 26)  # business day 12 after the 10th
    watch = machine.watch(completed)
    assert watch["last_reset_kind"] == "task"
    assert abs(watch["last_reset_at"] - DONE_AT) < timedelta(seconds=30)
    assert machine.steps(completed)[0]["overtaken_by"] == "task"

    # The evidence: the task, its step, how and when it was completed, when and by whom read.
    [row] = _evidence(machine)
    assert (row["task_id"], row["watch_id"], row["step_no"], row["status"]) == (
        task,
        watch["id"],
        1,
        "complete",
    )
    assert row["completed_at"] == watch["last_reset_at"]
    assert (row["read_at"], row["run_id"], row["counted"]) == (
        DONE_AT + AN_HOUR,
        result.run_id,
        True,
    )

    # The person's task is left as they left it: no second close, no comment. The e-mail's deal
    # has its task closed by Followup, saying why.
    machine.evaluate(DONE_AT + 2 * AN_HOUR)
    assert _task(machine, task)["status"]["status"] == "complete"
    assert _comments(machine, task) == []
    [close] = [
        a for a in machine.actions() if a["idempotency_key"] == f"close_task:{watch['id']}:1"
    ]
    assert (close["outcome"], close["last_error"]) == ("confirmed", "closed in ClickUp already")
    assert _comments(machine, _task_of(machine, emailed)) == [
        "Von Followup geschlossen: Es gab Kontakt (E-Mail am 10. März); die Nachverfolgung "
        "beginnt von dort neu."
    ]

    # The next task names the completion as the last contact.
    machine.sandbox_clock(datetime(2026, 3, 26, 8, 0, tzinfo=UTC))
    machine.evaluate(datetime(2026, 3, 26, 8, 0, tzinfo=UTC))
    [text] = [
        t["description"] for t in machine.tasks() if t["id"] == _task_of(machine, completed, 2)
    ]
    assert "Letzter Kontakt vor 16 Tagen: Aufgabe in ClickUp erledigt am 10. März." in text


def test_task_completion_is_ignored_with_the_setting_off(machine: Machine) -> None:
    [deal] = _fired(machine, "Completed, setting off")
    before = _due(machine, deal)
    _complete(machine, _task_of(machine, deal), DONE_AT)
    result = machine.evaluate(DONE_AT + AN_HOUR)
    assert "clickup_tasks_changed" not in _counts(result)  # ClickUp's list is not even read
    assert "reset" not in _counts(result)
    assert _due(machine, deal) == before
    assert machine.watch(deal)["last_reset_kind"] is None
    assert _evidence(machine) == []


def test_task_completion_a_task_followup_closed_does_not_reset(machine: Machine) -> None:
    machine.settings["clickup_completion_resets"] = True
    [deal] = _fired(machine, "Superseded by step 2")
    first = _task_of(machine, deal)
    machine.sandbox_clock(STEP_TWO)
    machine.evaluate(STEP_TWO)  # step 2 fires; Followup closes step 1's task as superseded
    assert _task(machine, first)["status"]["type"] == "closed"
    before = _due(machine, deal)
    result = machine.evaluate(STEP_TWO + AN_HOUR)  # lists the task Followup closed
    counts = _counts(result)
    assert counts["clickup_tasks_changed"] >= 1
    assert counts["tasks_completed_in_clickup"] == 0
    assert "reset" not in counts
    assert machine.watch(deal)["last_reset_kind"] is None
    assert _due(machine, deal) == before
    assert _evidence(machine) == []


def test_task_completion_is_applied_once(machine: Machine) -> None:
    machine.settings["clickup_completion_resets"] = True
    [deal] = _fired(machine, "Completed once")
    _complete(machine, _task_of(machine, deal), DONE_AT)
    machine.evaluate(DONE_AT + AN_HOUR)
    watch, due = machine.watch(deal), _due(machine, deal)
    # The cursor goes back (the runs overlap by 5 minutes anyway): the completion is listed again.
    machine.db.execute("UPDATE job_cursors SET position = %s WHERE name = 'evaluate'", (STEP_ONE,))
    again = machine.evaluate(DONE_AT + 2 * AN_HOUR)
    counts = _counts(again)
    assert (counts["clickup_tasks_changed"], counts["tasks_completed_in_clickup"]) == (1, 0)
    assert "reset" not in counts
    assert machine.watch(deal)["last_reset_at"] == watch["last_reset_at"]
    assert _due(machine, deal) == due
    assert len(_evidence(machine)) == 1


def test_task_completion_unreadable_clickup_is_a_problem_and_waits(machine: Machine) -> None:
    machine.settings["clickup_completion_resets"] = True
    [deal] = _fired(machine, "ClickUp answers garbage")
    _complete(machine, _task_of(machine, deal), DONE_AT)
    machine.fault(vendor="clickup", kind="malformed", method="GET", path="/list/.+/task$", count=1)
    failed = machine.evaluate(DONE_AT + AN_HOUR)
    assert machine.outcome(failed) == "partial"
    assert any("ClickUp tasks unreadable" in p for p in _problems(failed))
    assert machine.watch(deal)["last_reset_kind"] is None
    cursor = machine.db.execute("SELECT position FROM job_cursors WHERE name = 'evaluate'")
    assert cursor.fetchone() == {"position": STEP_ONE}  # not moved past the unread completion
    machine.evaluate(DONE_AT + 2 * AN_HOUR)
    assert machine.watch(deal)["last_reset_kind"] == "task"
    assert len(_evidence(machine)) == 1


def _problems(result: Any) -> list[str]:
    text = _counts(result).get("problem_list")
    return str(getattr(text, "value", text) or "").splitlines()


def test_task_completion_the_sandbox_lists_tasks_updated_after_a_moment(
    sandbox: str,
) -> None:
    """The client and the ClickUp double agree on ``date_updated_gt`` and ``include_closed``."""
    client = ClickUpClient(
        f"{sandbox}/clickup/api", SANDBOX.clickup_token.get_secret_value(), SANDBOX.clickup_list_id
    )
    with httpx.Client(base_url=f"{sandbox}/_sandbox", timeout=10) as control:
        control.post("/reset", json={"demo": False}).raise_for_status()

        def at(moment: datetime) -> None:
            control.post("/clock", json={"now": moment.isoformat()}).raise_for_status()

        at(DONE_AT - AN_HOUR)
        old = client.create_task(
            name="Old", markdown="", due_date=None, assignees=[], idempotency_key="k:1"
        )
        at(DONE_AT)
        done = client.create_task(
            name="Done", markdown="", due_date=None, assignees=[], idempotency_key="k:2"
        )
        client.close_task(task_id=done.id, comment="done")
    changes = client.list_tasks_changed_since(since=DONE_AT - timedelta(minutes=5))
    assert [t.id for t in changes.tasks] == [done.id]  # the old one, unchanged since, is not
    [change] = changes.tasks
    assert (change.completed, change.status, change.status_type) == (True, "complete", "closed")
    assert abs(change.completed_at - DONE_AT) < timedelta(seconds=30)
    assert old.id not in {t.id for t in client.list_tasks_changed_since(since=DONE_AT).tasks}
    client.close()


def _raw(task_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": task_id,
        "name": f"Task {task_id}",
        "status": {"status": "complete", "type": "closed"},
        "date_updated": "1773133200000",
        "date_closed": "1773133200000",
        "date_done": "1773133200000",
        **fields,
    }


def test_task_completion_the_client_pages_and_skips_a_task_that_breaks_its_schema() -> None:
    """ClickUp's contract: pages from 0, up to 100 a page, until ``last_page`` or a short page;
    a task that breaks its schema is reported, the others parse."""
    asked: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(dict(request.url.params))
        page = int(request.url.params["page"])
        if page == 0:
            raws = [_raw(f"t{n}") for n in range(100)]
            return httpx.Response(200, json={"tasks": raws, "last_page": False})
        broken = _raw("bad", date_updated="yesterday")
        done = _raw("d1", status={"status": "shipped", "type": "done"}, date_closed=None)
        return httpx.Response(200, json={"tasks": [broken, done], "last_page": False})

    client = ClickUpClient(
        "http://clickup.test/api", "pk_1_X", "list9", transport=httpx.MockTransport(handler)
    )
    changes = client.list_tasks_changed_since(since=DONE_AT)
    assert [p["page"] for p in asked] == ["0", "1"]  # a short page ends it, whatever last_page
    assert asked[0]["include_closed"] == "true"
    assert asked[0]["date_updated_gt"] == str(int(DONE_AT.timestamp() * 1000))
    assert len(changes.tasks) == 101
    [bad] = changes.invalid
    assert (bad.record_id, bad.field) == ("bad", "date_updated")
    done = changes.tasks[-1]
    assert (done.completed, done.completed_at) == (True, done.date_done)


@pytest.mark.parametrize(
    ("language", "contact", "comment"),
    [
        (
            "de",
            "Letzter Kontakt gestern: Aufgabe in ClickUp erledigt am 10. März.",
            "Von Followup geschlossen: Es gab Kontakt (Aufgabe in ClickUp erledigt am 10. März); "
            "die Nachverfolgung beginnt von dort neu.",
        ),
        (
            "en",
            "Last contact yesterday: task completed in ClickUp on 10 March.",
            "Closed by Followup: the customer was contacted (task completed in ClickUp on "
            "10 March); the follow-up starts again from there.",
        ),
    ],
)
def test_task_completion_reads_well_in_the_task_text(
    language: Language, contact: str, comment: str
) -> None:
    day = date(2026, 3, 10)
    facts = TaskFacts(
        deal_name="Offer",
        account_name=None,
        crm_url=None,
        stage="Proposal",
        amount=None,
        currency=None,
        step_no=2,
        step_count=3,
        due_on=day + timedelta(days=1),
        today=day + timedelta(days=1),
        contact=contact_of("task", day),
        summary=None,
    )
    assert contact in render_task(facts, language).markdown
    assert close_comment("contact", language, contact=contact_of("task", day)) == comment
