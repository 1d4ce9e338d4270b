"""ClickUp's part of each task action, alone (look up, perform, read back, mirror) against the
sandbox's ClickUp and a migrated database; the sequence around them is the engine's."""

from __future__ import annotations

from collections.abc import Iterator, Set
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

import httpx
import psycopg
import pytest

from followup_pipeline.defs.evaluate.task_upkeep import (
    CLOSED_NOTE,
    GONE_NOTE,
    TaskClosing,
    TaskRewrite,
)
from followup_pipeline.defs.evaluate.tasks import StepSettled, StepTask
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.registration import Subject
from followup_pipeline.domain.steps import DRY_RUN_REF
from followup_pipeline.domain.tasks import TaskContent
from followup_pipeline.engine.effects import ActionSpec, Performed, Sent
from followup_pipeline.integrations.clickup import ClickUpClient, Task
from followup_pipeline.integrations.errors import NotFoundError
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.store.cadences import Plan
from followup_pipeline.store.steps import TaskToUpdate, fire_step, steps_of
from followup_pipeline.store.watches import insert_watch

SANDBOX = SandboxConfig()
NOW = datetime(2026, 3, 9, 8, 0, tzinfo=UTC)
CONTENT = TaskContent("Follow up: Acme", "**Next step:** ask Acme.")
SPEC = ActionSpec(key="task:1:1", kind="task", due_at=NOW, time_zone="Europe/Berlin")


@pytest.fixture
def board(sandbox: str) -> Iterator[ClickUpClient]:
    """The client of the sandbox's follow-up list."""
    token = SANDBOX.clickup_token.get_secret_value()
    client = ClickUpClient(f"{sandbox}/clickup/api", token, SANDBOX.clickup_list_id)
    yield client
    client.close()


@pytest.fixture
def no_board() -> Iterator[ClickUpClient]:
    """A client whose every request fails the test: a mirror asks ClickUp nothing."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"a mirror called ClickUp: {request.method} {request.url}")

    client = ClickUpClient(
        "http://clickup.test/api", "pk_x", "list", transport=httpx.MockTransport(refuse)
    )
    yield client
    client.close()


def _watch(db: psycopg.Connection[Any]) -> int:
    """A watch of three steps; its id."""
    plan = Plan("default", (5, 12, 21), "Europe/Berlin", BusinessCalendar("DE"))
    with db.transaction():
        deal = Subject("deal-1", "Acme", "Proposal")
        watch_id = insert_watch(
            db, subject=deal, plan=plan, registered_at=NOW, registered_by="webhook"
        )
    assert watch_id is not None
    return watch_id


def _step(db: psycopg.Connection[Any], watch_id: int) -> tuple[Any, ...]:
    """Step 1 as its mirror leaves it: its task, the summary the task shows, why it was skipped."""
    row = db.execute(
        "SELECT task_ref, task_summary, skip_reason FROM watch_steps"
        " WHERE watch_id = %s AND step_no = 1",
        (watch_id,),
    ).fetchone()
    assert row is not None
    return tuple(row.values())


def _seen(sandbox: str) -> Any:
    """The sandbox's tasks and their comments, as it holds them."""
    with httpx.Client(base_url=f"{sandbox}/_sandbox", timeout=10) as control:
        return control.get("/clickup/tasks").json()


def test_step_task_finds_by_key_creates_once_touched_and_reads_back(
    sandbox: str, board: ClickUpClient
) -> None:
    touched: list[str] = []
    with pytest.raises(ValueError, match="only with its content"):
        StepTask(board, NOW).perform(SPEC, lambda: touched.append("settle"))
    sender = StepTask(board, NOW, CONTENT, assignees=[42])
    assert sender.look_up(SPEC) is None
    ref = sender.perform(SPEC, lambda: touched.append("create"))
    assert touched == ["create"]  # the in-flight window starts as the create leaves
    assert sender.look_up(SPEC) == ref  # the key travels in the task
    assert sender.look_up(replace(SPEC, key="task:1:12")) is None
    assert sender.read_back(SPEC, ref) is True
    assert sender.read_back(SPEC, None) is None
    with pytest.raises(NotFoundError):
        sender.read_back(SPEC, "no-such-task")
    [task] = _seen(sandbox)["tasks"]
    assert (task["id"], task["name"], task["description"]) == (ref, CONTENT.name, CONTENT.markdown)
    assert [a["id"] for a in task["assignees"]] == [42]


@dataclass(frozen=True)
class Mirrored:
    """A sent outcome, and what the step shows after its mirror (None: ``StepSettled``)."""

    sent: Sent
    step: tuple[str | None, str | None, str | None] | None
    settled_first: bool = False


MIRRORS = {
    "created": Mirrored(Sent("sent", "t1"), ("t1", "f" * 64, None)),
    "confirmed": Mirrored(Sent("confirmed", "t1"), ("t1", None, None)),
    "found by key": Mirrored(Sent("found", "t1"), ("t1", None, None)),
    "dry run": Mirrored(Sent("suppressed", reason="dry_run"), (DRY_RUN_REF, None, None)),
    "skipped": Mirrored(Sent("suppressed", reason="superseded"), (None, None, "superseded")),
    "skipped meanwhile": Mirrored(Sent("suppressed", reason="paused"), None, settled_first=True),
}  # fmt: skip


@pytest.mark.parametrize("case", MIRRORS.values(), ids=MIRRORS.keys())
def test_step_task_mirrors_each_outcome_onto_its_step(
    case: Mirrored, db: psycopg.Connection[Any], no_board: ClickUpClient
) -> None:
    watch_id = _watch(db)
    spec = replace(SPEC, watch_id=watch_id, step_no=1)
    sender = StepTask(no_board, NOW, CONTENT, summary="f" * 64)
    if case.settled_first:
        sender.mirror(db, spec, Sent("sent", "t0"))
    if case.step is None:
        with pytest.raises(StepSettled):
            sender.mirror(db, spec, case.sent)
        return
    sender.mirror(db, spec, case.sent)
    assert _step(db, watch_id) == case.step


def test_step_task_keeps_the_tasks_own_url_on_its_step_created_or_found_again(
    sandbox: str, board: ClickUpClient, db: psycopg.Connection[Any]
) -> None:
    watch_id = _watch(db)
    created_spec = replace(SPEC, watch_id=watch_id, step_no=1)
    sender = StepTask(board, NOW, CONTENT)
    ref = sender.perform(created_spec, lambda: None)
    assert ref is not None
    sender.mirror(db, created_spec, Sent("sent", ref))
    # A task whose answer was lost, found again by its key in a later run (a new sender).
    found_spec = replace(SPEC, key="task:1:2", watch_id=watch_id, step_no=2)
    lost = board.create_task(
        name="Lost", markdown="x", due_date=None, assignees=[], idempotency_key=found_spec.key
    )
    finder = StepTask(board, NOW)
    assert finder.look_up(found_spec) == lost.id
    finder.mirror(db, found_spec, Sent("found", lost.id))
    urls = {task["id"]: task["url"] for task in _seen(sandbox)["tasks"]}
    assert urls == {ref: f"{sandbox}/clickup/t/{ref}", lost.id: f"{sandbox}/clickup/t/{lost.id}"}
    first, second, third = steps_of(db, watch_id)
    assert (first.task_ref, first.task_url) == (ref, urls[ref])
    assert (second.task_ref, second.task_url) == (lost.id, urls[lost.id])
    assert (third.task_ref, third.task_url) == (None, None)


def test_step_task_keeps_no_url_but_a_plain_web_address(db: psycopg.Connection[Any]) -> None:
    watch_id = _watch(db)
    task = Task.model_validate(
        {"id": "t9", "name": "x", "status": "to do", "date_created": NOW,
         "url": "javascript:alert(1)"}
    )  # fmt: skip

    class Board:
        def get_task(self, *, task_id: str) -> Task:
            return task

    sender = StepTask(cast(ClickUpClient, Board()), NOW)
    assert sender.read_back(SPEC, "t9") is True
    assert sender.urls == {}
    sender.mirror(db, replace(SPEC, watch_id=watch_id, step_no=1), Sent("confirmed", "t9"))
    first = steps_of(db, watch_id)[0]
    assert (first.task_ref, first.task_url) == ("t9", None)


def test_task_rewrite_writes_the_description_and_a_gone_task_is_done(
    sandbox: str, board: ClickUpClient, db: psycopg.Connection[Any]
) -> None:
    watch_id = _watch(db)
    ref = StepTask(board, NOW, CONTENT).perform(SPEC, lambda: None)
    assert ref is not None
    row = TaskToUpdate(
        watch_id=watch_id,
        step_no=1,
        due_on=NOW.date(),
        task_ref=ref,
        step_count=3,
        summary_hash="a1" * 32,
        line1="One.",
        line2="Two.",
    )
    rewrite = TaskRewrite(board, row, TaskContent(CONTENT.name, "**New:** text."))
    assert rewrite.look_up(SPEC) is None  # cannot: a PUT is settled by sending it again
    touched: list[str] = []
    assert rewrite.perform(SPEC, lambda: touched.append("put")) == Performed(ref)
    assert (touched, rewrite.note, rewrite.read_back(SPEC, ref)) == (["put"], None, True)
    [task] = _seen(sandbox)["tasks"]
    assert task["description"] == "**New:** text."
    fire_step(db, watch_id=watch_id, step_no=1, task_ref=ref, at=NOW)
    rewrite.mirror(db, SPEC, Sent("suppressed", reason="dry_run"))  # a dry run shows nothing new
    assert _step(db, watch_id) == (ref, None, None)
    rewrite.mirror(db, SPEC, Sent("confirmed", ref))
    assert _step(db, watch_id) == (ref, "a1" * 32, None)
    gone = TaskRewrite(board, replace(row, task_ref="deleted"), CONTENT)
    assert gone.perform(SPEC, lambda: None) == Performed("deleted", GONE_NOTE)
    assert gone.note == GONE_NOTE


def test_task_closing_closes_with_one_comment_whatever_the_retries(
    sandbox: str, board: ClickUpClient
) -> None:
    first = StepTask(board, NOW, CONTENT).perform(SPEC, lambda: None)
    second = StepTask(board, NOW, CONTENT).perform(replace(SPEC, key="task:1:2"), lambda: None)
    assert first is not None
    assert second is not None

    def close(
        ref: str, comment: str = "Closed: why.", *, earlier: Set[str] = frozenset(), retried: bool
    ) -> tuple[str | None, int]:
        """Its note, and how many writes it made (each touched as it left)."""
        closing = TaskClosing(board, ref, comment, earlier=earlier, retried=retried)
        assert closing.look_up(SPEC) is None
        touched: list[str] = []
        assert closing.perform(SPEC, lambda: touched.append("write")) == Performed(
            ref, closing.note
        )
        assert closing.read_back(SPEC, ref) is True
        return closing.note, len(touched)

    assert close(first, retried=False) == (None, 1)
    # A retry after a lost answer: closed already, and the earlier attempt's comment is shown.
    assert close(first, "Closed: new words.", earlier={"Closed: why."}, retried=True) == (
        CLOSED_NOTE,
        0,
    )
    # Someone closed the second by hand: no comment; a retry whose comment failed adds it once.
    with httpx.Client(base_url=f"{sandbox}/clickup/api", timeout=10) as clickup:
        token = SANDBOX.clickup_token.get_secret_value()
        answer = clickup.put(
            f"/v2/task/{second}", json={"status": "complete"}, headers={"Authorization": token}
        )
        answer.raise_for_status()
    assert close(second, retried=False) == (CLOSED_NOTE, 0)
    assert close(second, earlier={"Old words."}, retried=True) == (CLOSED_NOTE, 1)
    assert close(second, retried=True) == (CLOSED_NOTE, 0)
    seen = _seen(sandbox)
    assert [t["status"]["type"] for t in seen["tasks"]] == ["closed", "closed"]
    comments = {ref: [c["comment_text"] for c in kept] for ref, kept in seen["comments"].items()}
    assert comments == {first: ["Closed: why."], second: ["Closed: why."]}
    assert close("deleted", retried=False) == (GONE_NOTE, 0)
