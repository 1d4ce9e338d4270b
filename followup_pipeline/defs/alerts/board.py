"""The operations list in ClickUp: alert tasks created at most once per ledger key, through the
engine's one way out (``engine/effects.py``).

ClickUp's create has no idempotency: the key travels on the task as a tag (or the list's key
field), and ``AlertTask``, the sender, looks it up after a lost answer and again before every
create; it creates the task (``touch`` as the request leaves), reads it back by its id, and has
no records of its own. ``OpsBoard`` turns how a send ended into what its callers read: the
task's id; ``DryRun`` in a dry run; ``AlertNotSent`` when ClickUp failed or cannot tell now, an
earlier create may still be landing, or the task's action is a dead letter.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import psycopg

from followup_pipeline.engine.effects import ActionSpec, Outbound, Sent, State
from followup_pipeline.engine.ledger import ActionLedger, DryRun
from followup_pipeline.engine.scope import Database, RunScope
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.settings import Settings

#: The tag every alert task carries in the operations list.
ALERT_TAG = "followup-alert"
#: An alert task's name is cut to this many characters.
NAME_MAX = 250
#: Why a task was not created, by how its send ended.
FAILURES: dict[State, str] = {
    "failed": "ClickUp failed",
    "unreadable": "ClickUp cannot tell now whether it has the task",
    "in_flight": "the last create may still be on its way",
    "dead": "failed every attempt: a dead letter until it is replayed",
    "off": "not created: the operations list is off",
}


class AlertNotSent(RuntimeError):
    """Neither channel took the alert; the next ``alert`` run tries again."""


def clickup_key(key: str) -> str:
    """The ledger key of an alert's ClickUp task."""
    return f"{key}:clickup"


class AlertTask:
    """ClickUp's part of creating one alert task (an ``effects.Sender``)."""

    searchable = True
    #: A create has no idempotency: the key is searched before every one.
    searches_first = True
    may_be_ambiguous = True

    def __init__(self, board: ClickUpClient, *, name: str, markdown: str) -> None:
        self.board = board
        self.name = name
        self.markdown = markdown

    def look_up(self, spec: ActionSpec) -> str | None:
        """The id of the list's task carrying the key (closed ones too), None when none."""
        found = self.board.find_tasks_by_key(idempotency_key=spec.key)
        return found[0].id if found else None

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Create the task with the alert tag and the key; its id."""
        touch()
        task = self.board.create_task(
            name=self.name[:NAME_MAX],
            markdown=self.markdown,
            due_date=None,
            assignees=(),
            idempotency_key=spec.key,
            tags=(ALERT_TAG,),
        )
        return task.id

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Nothing read: an alert task stays ``accepted`` (ClickUp's answer is the task), and a
        read costs a request of the minute's hundred while ClickUp may be what is failing."""
        return None

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """An alert task has no records of its own (the alert row names its key)."""


#: The attempts an alert action may fail before it is a dead letter: never.
NEVER_DEAD = sys.maxsize


class OpsBoard:
    """Tasks in the operations list, created at most once per ledger key."""

    def __init__(
        self, run: RunScope, db: Database, board: ClickUpClient, settings: Settings
    ) -> None:
        self.run = run
        self.board = board
        self.settings = settings
        self.ledger = ActionLedger.of(db, run, settings)
        # An alert is never a dead letter: the alert sensor's schedule of retries bounds its
        # tries, and one given up would reach no one.
        self.ledger.max_attempts = NEVER_DEAD
        self.outbound = Outbound(self.ledger)

    def post_once(self, key: str, *, name: str, markdown: str) -> str:
        """The task id of ``key``'s task, created unless it exists; ``AlertNotSent`` when
        ClickUp fails or cannot tell, an earlier create may still be on its way, or the action
        is a dead letter; ``DryRun`` in a dry run."""
        zone = self.settings.timezone
        spec = ActionSpec(key=key, kind="alert", due_at=self.run.now, time_zone=zone)
        sent = self.outbound.send(spec, AlertTask(self.board, name=name, markdown=markdown))
        if sent.reached:
            return sent.provider_ref or ""  # (none: another run created it meanwhile)
        if sent.state == "suppressed":  # the machine runs dry (the ledger recorded it)
            raise DryRun(key)
        why = FAILURES[sent.state] + (f": {sent.error}" if sent.error is not None else "")
        raise AlertNotSent(f"{key}: {why}") from sent.error
