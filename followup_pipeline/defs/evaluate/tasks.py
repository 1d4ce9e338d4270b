"""The ledger side of ``evaluate``: create, settle, suppress, update and close tasks in ClickUp.

Every task is an action keyed ``task:{watch}:{step}``; writing it again with a newer summary,
``task_update:{watch}:{step}:{12 hex of the summary's input hash}``; closing it (a later step's
task superseded it, activity overtook it, its watch closed), ``close_task:{watch}:{step}``. The
row says ``attempted`` (committed) before ClickUp is called; ClickUp is searched for the key
before any create; a step is marked fired only in the transaction that records its task. A row
left ``attempted``, ``unknown`` or ``accepted`` is settled by asking ClickUp before the step is
skipped for any reason, so a task that was created is never forgotten (docs/architecture.md §4).
"""

from datetime import date, time
from typing import Any, Literal, Protocol

import psycopg

from followup_pipeline.defs.evaluate.ports import TaskBoard
from followup_pipeline.domain.decisions import CloseReason
from followup_pipeline.domain.localtime import local_to_utc
from followup_pipeline.domain.registration import Observation, decide_one, stage_policy
from followup_pipeline.domain.tasks import TaskContent
from followup_pipeline.engine.ledger import ActionLedger, DryRun
from followup_pipeline.engine.scope import Database, RunScope, Tally
from followup_pipeline.integrations.clickup import Task, task_is_gone
from followup_pipeline.integrations.errors import IntegrationError, TransientError
from followup_pipeline.settings import Settings
from followup_pipeline.store import steps, watches
from followup_pipeline.store.ledger import ActionSpec, Attempt, FinalOutcome, SuppressReason
from followup_pipeline.store.steps import TaskToClose, TaskToUpdate
from followup_pipeline.store.watches import Watch

DRY_RUN_REF = "dry-run"
#: Outcomes of an action that may have reached ClickUp: ask it before anything else.
MAYBE_DONE = ("attempted", "unknown", "accepted")
Connection = psycopg.Connection[Any]
RATE_LIMITED = 429
#: What settling a step found: no task, a task (the step is fired now), ClickUp could not tell,
#: or a request of an earlier run may still be on its way (the step waits for a later run).
Resolution = Literal["nothing", "fired", "unreadable", "in_flight"]
#: Resolutions after which a step must wait: nothing may be sent or skipped for it now.
WAITS = ("unreadable", "in_flight")
#: Status types of a task that is done with: someone closed it already.
CLOSED_TYPES = ("closed", "done")
GONE_NOTE = "the task no longer exists in ClickUp"


class TaskWriter(TaskBoard, Protocol):
    """The task board, with what keeping a task up to date needs."""

    def update_task(self, *, task_id: str, markdown: str) -> Task:
        """Write a task's description again (idempotent)."""

    def add_comment(self, *, task_id: str, comment: str) -> None:
        """Add a comment to a task (sent once)."""

    def comment_texts(self, *, task_id: str) -> list[str]:
        """The texts of a task's newest comments."""


def update_key(watch_id: int, step_no: int, summary_hash: str) -> str:
    """The idempotency key of writing a step's task again with a newer summary."""
    return f"task_update:{watch_id}:{step_no}:{summary_hash[:12]}"


def task_key(watch_id: int, step_no: int) -> str:
    """The idempotency key of a step's task."""
    return f"task:{watch_id}:{step_no}"


class TaskLedger:
    """Tasks of steps through the action ledger, for one run at one instant.

    Its counts and problems gather in ``tally``. After ClickUp answers a write with 429 it makes
    no more writes in this run (the minute's window is spent; the next run goes on).
    """

    def __init__(self, run: RunScope, db: Database, board: TaskWriter, settings: Settings) -> None:
        self.db = db
        self.board = board
        self.settings = settings
        #: The team's language: the tasks' and their comments' (``FOLLOWUP_REPORT_LANGUAGE``).
        self.language = settings.report_language
        self.now = run.now
        self.ledger = ActionLedger.of(db, run, settings)
        self.tally = Tally(run.log)
        self.rate_limited = False

    def spec(self, watch: Watch, step_no: int, due_on: date) -> ActionSpec:
        """The ledger's description of a step's task."""
        return ActionSpec(
            key=task_key(watch.id, step_no),
            kind="task",
            due_at=local_to_utc(due_on, time(self.settings.business_hours_start), watch.time_zone),
            time_zone=watch.time_zone,
            watch_id=watch.id,
            step_no=step_no,
            payload={"subject_id": watch.subject_id, "due_on": due_on.isoformat()},
        )

    def settle(self, watch: Watch, step_no: int) -> Resolution:
        """Settle a step whose task may exist: a row that may have reached ClickUp asks it first.

        ``fired`` when the task exists (the step is now marked fired with it), ``nothing`` when no
        task exists, ``unreadable`` when ClickUp could not tell (the step must wait), and
        ``in_flight`` when the row is ``attempted``/``unknown`` and younger than a request can
        take: a run that died mid-create may have a request still landing, which a search now
        would miss and a create would double (the step waits for a later run).
        """
        key = task_key(watch.id, step_no)
        prior = self.ledger.prior(key)
        action, attempt = prior.action, prior.last_attempt
        if action is None or attempt is None or action.outcome not in MAYBE_DONE:
            return "nothing"
        if self.ledger.in_flight(prior):
            self.tally.count("waiting_in_flight")
            return "in_flight"
        task_id = action.provider_ref if action.outcome == "accepted" else None
        if task_id is None:
            try:
                found = self.board.find_tasks_by_key(idempotency_key=key)
            except IntegrationError as error:
                self.tally.problem(f"{key}: ClickUp unreadable, the step waits: {error}")
                return "unreadable"
            if not found:
                # The search proves the attempt did not take effect: it failed, and counts
                # towards the dead-letter limit (an ambiguous 5xx again and again must end).
                self.ledger.finish(attempt, "failed", error="ClickUp has no task with this key")
                return "nothing"
            task_id = found[0].id
        self._record_fired(attempt, watch.id, step_no, task_id, "confirmed")
        self.tally.count("resolved_existing")
        return "fired"

    def skip(self, watch: Watch, step_no: int, due_on: date, reason: SuppressReason) -> Resolution:
        """Skip an open step for ``reason`` and suppress its action, unless its task exists."""
        resolution = self.settle(watch, step_no)
        if resolution != "nothing":
            return resolution  # a task exists (now fired), or the step must wait
        skipped: list[bool] = []

        def skip_step(conn: Connection) -> bool:
            skipped.append(
                steps.skip_step(
                    conn, watch_id=watch.id, step_no=step_no, reason=reason, at=self.now
                )
            )
            return skipped[0]

        self.ledger.suppress(self.spec(watch, step_no, due_on), reason, first=skip_step)
        if skipped[0]:
            self.tally.count(f"skipped_{reason}")
        return "nothing"

    def apply(self, watch: Watch, observation: Observation) -> bool:
        """Close the open ``watch`` when the rules say so of what the CRM says now (its deal
        left the watched stages, or is gone); True when they do (closed now, or by another run
        meanwhile): then nothing more is done for it."""
        registration = decide_one(observation, watch, stage_policy(self.settings))
        if registration.action != "close" or registration.reason is None:
            return False
        self.close_watch(watch, registration.reason)  # (False: another run closed it first)
        return True

    def close_watch(self, watch: Watch, reason: CloseReason) -> bool:
        """Close a watch and skip its open steps; False if it was closed already."""
        with self.db.connection() as conn, conn.transaction():
            closed = watches.close_watch(conn, watch_id=watch.id, reason=reason, closed_at=self.now)
        if closed:
            self.closed(watch, reason)
        return closed

    def closed(self, watch: Watch, reason: CloseReason) -> None:
        """After ``watch`` was closed for ``reason``: its open steps are skipped as
        ``deal_closed`` (a task that exists is kept as fired, so that it is closed in ClickUp
        with the watch)."""
        self.tally.count(f"closed_{reason}")
        with self.db.connection() as conn:
            rows = steps.steps_of(conn, watch.id)
        for step in rows:
            if step.open:
                self.skip(watch, step.step_no, step.due_on, "deal_closed")

    def create_task(
        self,
        watch: Watch,
        step_no: int,
        due_on: date,
        content: TaskContent,
        summary: str | None,
        assignees: list[int],
    ) -> None:
        """Create the step's task through the ledger, searching ClickUp for its key first;
        ``content`` was written with the summary of input hash ``summary`` (None: without)."""
        spec = self.spec(watch, step_no, due_on)
        if self._waits(spec.key):
            return
        try:
            attempt = self.ledger.begin(
                spec,
                dry_run_also=lambda conn: steps.fire_step(
                    conn, watch_id=watch.id, step_no=step_no, task_ref=DRY_RUN_REF, at=self.now
                ),
            )
        except DryRun:
            self.tally.count("fired_dry_run")
            return
        if attempt is None:
            return  # it reached ClickUp before; settling has marked the step
        outcome: FinalOutcome = "confirmed"
        shown = None  # a task found by its key was written by an earlier attempt: not known
        try:
            found = self.board.find_tasks_by_key(idempotency_key=spec.key)
            if found:
                task_id = found[0].id
                self.tally.count("found_existing")
            else:
                self.ledger.touch(attempt)  # the in-flight window starts now
                task_id = self.board.create_task(
                    name=content.name,
                    markdown=content.markdown,
                    due_date=spec.due_at,
                    assignees=assignees,
                    idempotency_key=spec.key,
                ).id
                outcome = "accepted"
                shown = summary
        except IntegrationError as error:
            self._failed(attempt, spec.key, error)
            return
        self._record_fired(attempt, watch.id, step_no, task_id, outcome, summary=shown)
        self.tally.count("fired")
        if outcome == "accepted":
            self._confirm(attempt, task_id)

    def update_task(self, watch: Watch, row: TaskToUpdate, content: TaskContent) -> None:
        """Write the open task again with ``content`` (a newer summary): once per summary."""
        spec = ActionSpec(
            key=update_key(watch.id, row.step_no, row.summary_hash),
            kind="task_update",
            due_at=self.now,
            time_zone=watch.time_zone,
            watch_id=watch.id,
            step_no=row.step_no,
            payload={"task_id": row.task_ref, "summary": row.summary_hash},
        )
        attempt = self._start(spec)
        if attempt is None:
            return
        note = None
        try:
            self.board.update_task(task_id=row.task_ref, markdown=content.markdown)
        except IntegrationError as error:
            if not task_is_gone(error):  # a PUT, settled by sending it again: failed
                self._failed(attempt, spec.key, error, ambiguous_allowed=False)
                return
            note = GONE_NOTE  # nothing left to write to

        def shows(conn: Connection) -> None:
            steps.set_task_summary(
                conn, watch_id=watch.id, step_no=row.step_no, task_summary=row.summary_hash
            )

        self.ledger.finish(attempt, "confirmed", provider_ref=row.task_ref, error=note, also=shows)
        self.tally.count("tasks_updated")

    def close_tasks(self) -> None:
        """Settle the steps a closed watch left open (their task may exist), then close with a
        comment saying why the tasks a later step's task superseded, that activity overtook, and
        those of closed watches (``FOLLOWUP_CLICKUP_CLOSE_ON_WATCH_CLOSE``)."""
        with self.db.connection() as conn:
            left_open = steps.open_steps_of_closed_watches(conn)
        for step in left_open:
            with self.db.connection() as conn:
                watch = watches.watch_by_id(conn, step.watch_id)
            if watch is not None:
                self.skip(watch, step.step_no, step.due_on, "deal_closed")
        on_watch_close = self.settings.clickup_close_on_watch_close
        with self.db.connection() as conn:
            rows = steps.tasks_to_close(conn, on_watch_close=on_watch_close)
        for row in rows:
            self._close_task(row)

    def _close_task(self, row: TaskToClose) -> None:
        """Close one task with its comment, at most once: a task someone closed or deleted
        already counts as closed; a retry whose earlier attempt may have closed it adds the
        comment only if ClickUp does not show it yet."""
        reason, comment = row.closing(self.language, self.now)
        spec = ActionSpec(
            key=f"close_task:{row.watch_id}:{row.step_no}",
            kind="close_task",
            due_at=row.closed_at or self.now,
            time_zone=row.time_zone,
            watch_id=row.watch_id,
            step_no=row.step_no,
            payload={"task_id": row.task_ref, "reason": reason, "comment": comment},
        )
        prior = self.ledger.prior(spec.key)
        if self.ledger.in_flight(prior):  # (never a dead letter: that one failed)
            self.tally.count("waiting_in_flight")  # its comment may still be on its way
            return
        said = prior.action.payload.get("comment") if prior.action else None
        earlier = {comment, said} if isinstance(said, str) else {comment}
        attempt = self._start(spec)
        if attempt is None:
            return
        note = None
        try:
            task = self.board.get_task(task_id=row.task_ref)
            if task.status_type not in CLOSED_TYPES:
                self.board.close_task(task_id=row.task_ref, comment=comment)
            else:
                note = "closed in ClickUp already"
                # An earlier attempt may have closed it and lost its comment's answer.
                retried = attempt.attempt_no > 1
                if retried and not earlier & set(self.board.comment_texts(task_id=row.task_ref)):
                    self.board.add_comment(task_id=row.task_ref, comment=comment)
        except IntegrationError as error:
            if not task_is_gone(error):
                # Closing is no create: settled by trying again (the PUT is idempotent, the
                # comment looked for first), so it is failed, never unknown, and ends as a dead
                # letter after its attempts.
                self._failed(attempt, spec.key, error, ambiguous_allowed=False)
                return
            # Someone deleted the task (or moved it where we cannot see it): what closing it
            # wanted is already true, so this is done, not a failure that ends a dead letter.
            note = GONE_NOTE
        self.ledger.finish(attempt, "confirmed", provider_ref=row.task_ref, error=note)
        self.tally.count("tasks_closed")
        self.tally.count(f"tasks_closed_{reason}")

    def _start(self, spec: ActionSpec) -> Attempt | None:
        """An attempt at ``spec``; None when it waits as a dead letter, the machine runs dry,
        or it reached ClickUp before."""
        if self._waits(spec.key):
            return None
        try:
            return self.ledger.begin(spec)
        except DryRun:
            return None

    def _waits(self, key: str) -> bool:
        """Whether the action of ``key`` waits: as a dead letter (counted, and left alone), or
        after a 429 (this run writes no more to ClickUp; a dry run reaches nobody anyway)."""
        if not self.ledger.dead(key):
            if self.rate_limited and not self.ledger.dry_run:
                self.tally.count("waiting_on_clickup_rate_limit")
                return True
            return False
        self.tally.count("dead_letters")
        self.tally.log.warning(
            "%s failed %s times and waits as a dead letter: followup dead-letters replay action:%s",
            key,
            self.ledger.max_attempts,
            key,
        )
        return True

    def _record_fired(
        self,
        attempt: Attempt,
        watch_id: int,
        step_no: int,
        task_id: str,
        outcome: FinalOutcome,
        *,
        summary: str | None = None,
    ) -> None:
        """The attempt's outcome and the step marked fired with its task (and the summary it was
        written with, when known), in one transaction."""

        def fire(conn: Connection) -> bool:
            return steps.fire_step(
                conn,
                watch_id=watch_id,
                step_no=step_no,
                task_ref=task_id,
                at=self.now,
                task_summary=summary,
            )

        self.ledger.finish(attempt, outcome, provider_ref=task_id, also=fire)

    def _failed(
        self, attempt: Attempt, key: str, error: IntegrationError, *, ambiguous_allowed: bool = True
    ) -> None:
        ambiguous = ambiguous_allowed and isinstance(error, TransientError) and error.ambiguous
        self.ledger.fail(attempt, str(error), maybe_done=ambiguous)
        self.tally.count("failed")
        if isinstance(error, TransientError) and error.status == RATE_LIMITED:
            self.rate_limited = True
        self.tally.problem(f"{key}: ClickUp failed, the step stays due: {error}")

    def _confirm(self, attempt: Attempt, task_id: str) -> None:
        """Read the task back; ``confirmed`` if ClickUp shows it, else it stays ``accepted``."""
        try:
            self.board.get_task(task_id=task_id)
        except IntegrationError as error:
            self.tally.log.info("task %s not read back yet: %s", task_id, error)
            return
        self.ledger.finish(attempt, "confirmed", provider_ref=task_id)
