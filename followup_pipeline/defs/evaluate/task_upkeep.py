"""Keeping the tasks in ClickUp up to date: writing an open task again when its deal got a newer
summary, and closing the tasks a later step's task superseded, activity overtook, or whose watch
closed, each through the one way out (``engine/effects.py``, docs/architecture.md §4).

Writing again is keyed ``task_update:{watch}:{step}:{12 hex of the summary's input hash}``,
closing ``close_task:{watch}:{step}``. Both are PUTs, settled by sending them again, so neither
is ever ``unknown`` and neither is looked up: ``TaskRewrite`` and ``TaskClosing`` are ClickUp's
part. A task someone deleted (or moved out of sight) has nothing left to write to, and closing
it is done; a task someone closed already counts as closed, and a retry whose earlier attempt
may have closed it adds the comment only if ClickUp does not show it yet.
"""

from collections.abc import Callable, Set
from typing import Any

import psycopg

from followup_pipeline.defs.evaluate.ports import TaskWriter
from followup_pipeline.defs.evaluate.tasks import TaskLedger
from followup_pipeline.domain.tasks import TaskContent
from followup_pipeline.engine.effects import ActionSpec, Performed, Sent
from followup_pipeline.integrations.clickup import task_is_gone
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.store import steps, watches
from followup_pipeline.store.steps import TaskToClose, TaskToUpdate
from followup_pipeline.store.watches import Watch

#: Status types of a task that is done with: someone closed it already.
CLOSED_TYPES = ("closed", "done")
GONE_NOTE = "the task no longer exists in ClickUp"
CLOSED_NOTE = "closed in ClickUp already"


def update_key(watch_id: int, step_no: int, summary_hash: str) -> str:
    """The idempotency key of writing a step's task again with a newer summary."""
    return f"task_update:{watch_id}:{step_no}:{summary_hash[:12]}"


class TaskRewrite:
    """ClickUp's part of writing an open task again (a ``Sender``): one idempotent PUT, the
    summary it shows mirrored onto the step."""

    searchable = False  # a PUT: a lost answer is settled by sending it again
    searches_first = False
    may_be_ambiguous = False

    def __init__(self, board: TaskWriter, row: TaskToUpdate, content: TaskContent) -> None:
        self.board = board
        self.row = row
        self.content = content
        #: Why it is done without a write (the task is gone), for the run's log.
        self.note: str | None = None

    def look_up(self, spec: ActionSpec) -> str | None:
        """Cannot: ClickUp keeps no key of a write."""
        return None

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> Performed:
        """Write the description again; a task that is gone has nothing left to write to."""
        touch()
        try:
            self.board.update_task(task_id=self.row.task_ref, markdown=self.content.markdown)
        except IntegrationError as error:
            if not task_is_gone(error):
                raise
            self.note = GONE_NOTE
        return Performed(self.row.task_ref, self.note)

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Shown: the PUT answered with the task as ClickUp has it now (or it is gone)."""
        return True

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """The summary the step's task shows now (nothing in a dry run)."""
        if sent.state in ("sent", "confirmed"):
            steps.set_task_summary(
                conn,
                watch_id=self.row.watch_id,
                step_no=self.row.step_no,
                task_summary=self.row.summary_hash,
            )


class TaskClosing:
    """ClickUp's part of closing a task with a comment saying why (a ``Sender``): at most one
    comment, whatever retries and lost answers; nothing of ours to mirror."""

    searchable = False  # the PUT is idempotent and the comment is looked for before it
    searches_first = False
    may_be_ambiguous = False

    def __init__(
        self, board: TaskWriter, task_ref: str, comment: str, *, earlier: Set[str], retried: bool
    ) -> None:
        self.board = board
        self.task_ref = task_ref
        self.comment = comment
        #: The comments an earlier attempt may have added (its text may differ from today's).
        self.earlier = earlier | {comment}
        #: An earlier attempt may have closed the task and lost its comment's answer.
        self.retried = retried
        self.note: str | None = None

    def look_up(self, spec: ActionSpec) -> str | None:
        """Cannot: ClickUp keeps no key of a close."""
        return None

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> Performed:
        """Close the task with its comment, unless someone closed or deleted it already."""
        board, ref = self.board, self.task_ref
        try:
            if board.get_task(task_id=ref).status_type not in CLOSED_TYPES:
                touch()
                board.close_task(task_id=ref, comment=self.comment)
            else:
                self.note = CLOSED_NOTE
                if self.retried and not self.earlier & set(board.comment_texts(task_id=ref)):
                    touch()
                    board.add_comment(task_id=ref, comment=self.comment)
        except IntegrationError as error:
            if not task_is_gone(error):
                raise
            # Someone deleted the task (or moved it where we cannot see it): what closing it
            # wanted is already true, so this is done, not a failure that ends a dead letter.
            self.note = GONE_NOTE
        return Performed(ref, self.note)

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Shown: the PUT answered with the task closed (or it was closed, or is gone)."""
        return True

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """Nothing: a close is known by its action (``steps.tasks_to_close`` reads it)."""


class TaskUpkeep:
    """Writes open tasks again and closes tasks, for one run: with the ``TaskLedger``'s way out,
    counts and 429 stop."""

    def __init__(self, tasks: TaskLedger) -> None:
        self.tasks = tasks
        self.tally = tasks.tally

    def update_task(self, watch: Watch, row: TaskToUpdate, content: TaskContent) -> None:
        """Write the open task again with ``content`` (a newer summary): once per summary."""
        tasks = self.tasks
        spec = ActionSpec(
            key=update_key(watch.id, row.step_no, row.summary_hash),
            kind="task_update",
            due_at=tasks.now,
            time_zone=watch.time_zone,
            watch_id=watch.id,
            step_no=row.step_no,
            payload={"task_id": row.task_ref, "summary": row.summary_hash},
        )
        rewrite = TaskRewrite(tasks.board, row, content)
        sent = tasks.outbound.send(spec, rewrite, mode=tasks.mode)
        if sent.state in ("sent", "confirmed"):
            self._noted(spec.key, rewrite.note)
            self.tally.count("tasks_updated")
        elif sent.state != "suppressed":
            tasks.account(spec.key, sent)

    def close_tasks(self) -> None:
        """Settle the steps a closed watch left open (their task may exist), then close with a
        comment saying why the tasks a later step's task superseded, that activity overtook, and
        those of closed watches (``FOLLOWUP_CLICKUP_CLOSE_ON_WATCH_CLOSE``)."""
        db = self.tasks.db
        with db.connection() as conn:
            left_open = steps.open_steps_of_closed_watches(conn)
        for step in left_open:
            with db.connection() as conn:
                watch = watches.watch_by_id(conn, step.watch_id)
            if watch is not None:
                self.tasks.skip(watch, step.step_no, step.due_on, "deal_closed")
        on_watch_close = self.tasks.settings.clickup_close_on_watch_close
        with db.connection() as conn:
            rows = steps.tasks_to_close(conn, on_watch_close=on_watch_close)
        for row in rows:
            self._close_task(row)

    def _close_task(self, row: TaskToClose) -> None:
        """Close one task with its comment, at most once (a dead letter, after a 429 or in a
        dry run: not now)."""
        tasks = self.tasks
        reason, comment = row.closing(tasks.settings.report_language, tasks.now)
        spec = ActionSpec(
            key=f"close_task:{row.watch_id}:{row.step_no}",
            kind="close_task",
            due_at=row.closed_at or tasks.now,
            time_zone=row.time_zone,
            watch_id=row.watch_id,
            step_no=row.step_no,
            payload={"task_id": row.task_ref, "reason": reason, "comment": comment},
        )
        earlier = tasks.ledger.prior(spec.key).action  # what an earlier attempt said
        said = earlier.payload.get("comment") if earlier else None
        closing = TaskClosing(
            tasks.board,
            row.task_ref,
            comment,
            earlier={said} if isinstance(said, str) else set(),
            retried=earlier is not None and earlier.attempts > 0,
        )
        sent = tasks.outbound.send(spec, closing, mode=tasks.mode)
        if sent.state in ("sent", "confirmed"):
            self._noted(spec.key, closing.note)
            self.tally.count("tasks_closed")
            self.tally.count(f"tasks_closed_{reason}")
        elif sent.state != "suppressed":
            tasks.account(spec.key, sent)

    def _noted(self, key: str, note: str | None) -> None:
        """Log why an action was done without its write (the protocol records no note)."""
        if note is not None:
            self.tally.log.info("%s: %s", key, note)
