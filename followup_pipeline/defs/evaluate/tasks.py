"""The tasks of due steps in ClickUp: settle a step whose task may exist, skip it, or create its
task, through the one way out (``engine/effects.py``, docs/architecture.md §4).

Every task is an action keyed ``task:{watch}:{step}``. The engine owns the sequence; ``StepTask``
is ClickUp's part: the key travels in the task and is searched before any create (ClickUp has no
idempotency), and a step is marked fired (or skipped) only in the transaction that records its
action. A row that may have reached ClickUp is settled by asking it before the step is skipped
for any reason, so a task that was created is never forgotten. Writing an open task again and
closing tasks is ``task_upkeep.py``'s.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any, Literal

import psycopg

from followup_pipeline.defs.evaluate.ports import TaskWriter
from followup_pipeline.domain.account import late_ending
from followup_pipeline.domain.decisions import CloseReason
from followup_pipeline.domain.localtime import local_to_utc
from followup_pipeline.domain.registration import Observation, decide_one, stage_policy
from followup_pipeline.domain.steps import DRY_RUN_REF, task_key
from followup_pipeline.domain.tasks import TaskContent, safe_link
from followup_pipeline.engine import late
from followup_pipeline.engine.effects import ActionSpec, Mode, Outbound, Sent, SuppressReason
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.engine.scope import Database, RunScope, Tally
from followup_pipeline.integrations.clickup import Task
from followup_pipeline.integrations.errors import TransientError
from followup_pipeline.settings import Settings
from followup_pipeline.store import steps, watches
from followup_pipeline.store.watches import Watch

RATE_LIMITED = 429
#: What settling a step found: no task, a task (the step is fired now), ClickUp could not tell,
#: or a request of an earlier run may still be on its way (the step waits for a later run).
Resolution = Literal["nothing", "fired", "unreadable", "in_flight"]
#: Resolutions after which a step must wait: nothing may be sent or skipped for it now.
WAITS = ("unreadable", "in_flight")


class StepSettled(Exception):
    """The step was fired or skipped meanwhile (by another run): nothing is suppressed."""


@dataclass
class StepTask:
    """ClickUp's part of a step's task (a ``Sender``): found by its key, created with
    ``content`` (only a create needs it), read back, and mirrored onto the step at ``at``, with
    the task's own address as ClickUp's answers gave it (``urls``; the mirror asks nothing)."""

    searchable = True
    searches_first = True  # ClickUp's create has no idempotency: search before every create
    may_be_ambiguous = True

    board: TaskWriter
    at: datetime
    content: TaskContent | None = None
    #: The input hash of the summary ``content`` was written with (None: without one).
    summary: str | None = None
    assignees: list[int] = field(default_factory=list)
    #: Each task's own address by its id, as this sender's answers from ClickUp gave it (only a
    #: plain http(s) one: no link is better than a foreign one).
    urls: dict[str, str] = field(default_factory=dict)

    def _seen(self, task: Task) -> str:
        """Keep the address of a task ClickUp answered with; its id."""
        url = safe_link(task.url)
        if url is not None:
            self.urls[task.id] = url
        return task.id

    def look_up(self, spec: ActionSpec) -> str | None:
        """The task carrying the key (closed ones too), if any."""
        found = self.board.find_tasks_by_key(idempotency_key=spec.key)
        return self._seen(found[0]) if found else None

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Create the task (one POST, never retried: a lost answer is settled by the search)."""
        if self.content is None:
            raise ValueError(f"{spec.key}: a task is created only with its content")
        touch()
        task = self.board.create_task(
            name=self.content.name,
            markdown=self.content.markdown,
            due_date=spec.due_at,
            assignees=self.assignees,
            idempotency_key=spec.key,
        )
        return self._seen(task)

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Whether ClickUp shows the task (``NotFoundError`` while it does not)."""
        if provider_ref is None:
            return None
        self._seen(self.board.get_task(task_id=provider_ref))
        return True

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """The step fired with its task and the task's address when an answer gave it (with
        the summary it was written with, when this attempt wrote it), fired with ``dry-run`` in a
        dry run, or skipped for the reason; ``StepSettled`` when another run settled the step
        first (the transaction rolls back)."""
        watch_id, step_no = spec.watch_id, spec.step_no
        assert watch_id is not None
        assert step_no is not None
        if sent.state == "suppressed" and sent.reason != "dry_run":
            assert sent.reason is not None
            skipped = steps.skip_step(
                conn, watch_id=watch_id, step_no=step_no, reason=sent.reason, at=self.at
            )
            if not skipped:
                raise StepSettled(spec.key)
            return
        ref = DRY_RUN_REF if sent.state == "suppressed" else sent.provider_ref
        assert ref is not None
        url = None if sent.state == "suppressed" else self.urls.get(ref)
        summary = self.summary if sent.state == "sent" else None  # a found task: not known
        steps.fire_step(
            conn,
            watch_id=watch_id,
            step_no=step_no,
            task_ref=ref,
            at=self.at,
            task_summary=summary,
            task_url=url,
        )


class TaskLedger:
    """Tasks of steps through the one way out, for one run at one instant.

    Its counts and problems gather in ``tally`` (``task_upkeep.py`` adds its own there too).
    After ClickUp answers a write with 429 it makes no more writes in this run (the minute's
    window is spent; the next run goes on).
    """

    def __init__(self, run: RunScope, db: Database, board: TaskWriter, settings: Settings) -> None:
        self.db = db
        self.board = board
        self.settings = settings
        self.now = run.now
        self.ledger = ActionLedger.of(db, run, settings)
        self.outbound = Outbound(self.ledger)
        self.tally = Tally(run.log)
        self.rate_limited = False

    @property
    def mode(self) -> Mode:
        """``off`` after a 429 (this run writes no more to ClickUp), else ``live``."""
        return "off" if self.rate_limited else "live"

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

    def settle(self, watch: Watch, step_no: int, due_on: date) -> Resolution:
        """Settle a step whose task may exist: a row that may have reached ClickUp asks it first.

        ``fired`` when the task exists (the step is now marked fired with it), ``nothing`` when no
        task exists, ``unreadable`` when ClickUp could not tell (the step must wait), and
        ``in_flight`` when the row is ``attempted``/``unknown`` and younger than a request can
        take: a run that died mid-create may have a request still landing, which a search now
        would miss and a create would double (the step waits for a later run).
        """
        spec, sender = self.spec(watch, step_no, due_on), StepTask(self.board, self.now)
        sent = self.outbound.settle(spec, sender)
        if sent is None or sent.state == "dead":
            return "nothing"  # (a dead letter is left alone: create_task counts it)
        if sent.state in WAITS:
            self.account(spec.key, sent)
            if sent.state == "unreadable":
                self.late(watch, step_no, due_on, f"ClickUp could not tell if its task exists: "
                          f"{sent.error}")  # fmt: skip
            return "in_flight" if sent.state == "in_flight" else "unreadable"
        if sent.state == "done":  # ClickUp took it, yet the step is open: mirrored here
            if sent.provider_ref is None:
                return "nothing"
            with self.db.connection() as conn, conn.transaction():
                sender.mirror(conn, spec, sent)
        self.tally.count("resolved_existing")
        return "fired"

    def skip(self, watch: Watch, step_no: int, due_on: date, reason: SuppressReason) -> Resolution:
        """Skip an open step for ``reason`` and suppress its action, unless its task exists."""
        resolution = self.settle(watch, step_no, due_on)
        if resolution != "nothing":
            return resolution  # a task exists (now fired), or the step must wait
        spec = self.spec(watch, step_no, due_on)
        try:
            sent = self.outbound.suppress(spec, StepTask(self.board, self.now), reason)
        except StepSettled:
            return "nothing"
        if sent.state == "suppressed":
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
        """Create the step's task, ClickUp searched for its key first; ``content`` was written
        with the summary of input hash ``summary`` (None: without)."""
        spec = self.spec(watch, step_no, due_on)
        creator = StepTask(self.board, self.now, content, summary=summary, assignees=assignees)
        sent = self.outbound.send(spec, creator, mode=self.mode)
        if sent.state == "suppressed":
            self.tally.count("fired_dry_run")
        elif sent.state in ("found", "sent", "confirmed"):
            if sent.state == "found":
                self.tally.count("found_existing")
            self.tally.count("fired")
        else:
            self.account(spec.key, sent)  # (done: it reached ClickUp before; the step is marked)
            if sent.state in ("failed", "unreadable"):
                self.late(watch, step_no, due_on, f"ClickUp did not take its task: {sent.error}")

    def late(self, watch: Watch, step_no: int, due_on: date, why: str) -> None:
        """Late means owned: a step that waits on a vendor (``why``) longer than its grace
        (``domain/account.py``; from its due moment, or from its watch's opening if later) goes
        on the list of work with the operations owner, once while it waits; it closes by itself
        when the step fires or is skipped."""
        spec = self.spec(watch, step_no, due_on)
        late_from = max(spec.due_at, watch.registered_at)
        if late_ending("step", late_from, self.now) == "not_late" or self.ledger.dead(spec.key):
            return  # not late yet, or its task's action is a dead letter with its own item
        name = f"{watch.subject_name} ({watch.account_name})" if watch.account_name else None
        what = f"step {step_no} of deal {watch.subject_id}" + (f", {name}" if name else "")
        reason = (
            f"late since {late_from:%Y-%m-%d %H:%M} UTC: {why}; its task is created when the "
            "vendor answers again, or close it with a decision (the step is then skipped)"
        )
        with self.db.connection() as conn:
            parked = late.park_step(
                conn,
                watch_id=watch.id,
                step_no=step_no,
                what=what,
                reason=reason,
                settings=self.settings,
                at=self.now,
            )
        if parked:
            self.tally.count("late_steps_owned")

    def account(self, key: str, sent: Sent) -> None:
        """Count an action that did not reach ClickUp now: a dead letter (logged, left alone),
        after a 429, in flight, ClickUp unreadable, or a failure (the step stays due)."""
        if sent.state == "dead":
            self.tally.count("dead_letters")
            self.tally.log.warning(
                "%s failed %s times and waits as a dead letter: followup dead-letters replay "
                "action:%s", key, self.ledger.max_attempts, key,
            )  # fmt: skip
        elif sent.state == "off":
            self.tally.count("waiting_on_clickup_rate_limit")
        elif sent.state == "in_flight":
            self.tally.count("waiting_in_flight")
        elif sent.state == "unreadable":
            self.tally.problem(
                f"{key}: ClickUp unreadable, the step waits: {sent.error}", sent.error, item=key
            )
        elif sent.state == "failed":
            self.tally.count("failed")
            error = sent.error
            if isinstance(error, TransientError) and error.status == RATE_LIMITED:
                self.rate_limited = True
            self.tally.problem(
                f"{key}: ClickUp failed, the step stays due: {error}", error, item=key
            )
