"""What ``evaluate``'s workers need from the vendors, named as Protocols: the CRM, the task
board, and what keeping its tasks up to date needs (the database is ``engine.scope.Database``).
The real ones are the vendor clients; a test may hand in anything that answers the same way."""

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from followup_pipeline.integrations.clickup import Task
from followup_pipeline.integrations.espocrm_models import (
    Call,
    Deal,
    DealListing,
    Email,
    Listing,
    Meeting,
)


class DealSource(Protocol):
    """The CRM, read only: deals and their activity."""

    def stage_options(self) -> list[str]:
        """The stage names the CRM allows."""
        ...

    def list_deals(self, *, stages: Sequence[str]) -> DealListing:
        """Every deal in one of ``stages``; records that broke schema are in ``invalid``."""
        ...

    def list_emails_since(self, *, since: datetime) -> Listing[Email]:
        """Every deal's e-mails created after ``since``."""
        ...

    def list_calls_since(self, *, since: datetime) -> Listing[Call]:
        """Every deal's calls modified after ``since``."""
        ...

    def list_meetings_since(self, *, since: datetime) -> Listing[Meeting]:
        """Every deal's meetings modified after ``since``."""
        ...

    def list_deals_by_ids(self, *, ids: Sequence[str]) -> DealListing:
        """The deals of ``ids`` that the CRM lists (50 ids to a request)."""
        ...

    def get_deal(self, *, deal_id: str) -> Deal:
        """One deal; ``NotFoundError`` if it is gone."""
        ...


class TaskBoard(Protocol):
    """Where follow-up tasks are created, found by their key, and closed."""

    def find_tasks_by_key(self, *, idempotency_key: str) -> list[Task]:
        """The tasks, closed included, that carry ``idempotency_key``."""
        ...

    def create_task(
        self,
        *,
        name: str,
        markdown: str,
        due_date: datetime | None,
        assignees: Sequence[int],
        idempotency_key: str,
        tags: Sequence[str] = (),
    ) -> Task:
        """Create a task carrying ``idempotency_key`` (one POST, never retried)."""
        ...

    def get_task(self, *, task_id: str) -> Task:
        """One task; ``NotFoundError`` if it is gone."""
        ...

    def close_task(self, *, task_id: str, comment: str, closed_status: str | None = None) -> Task:
        """Close a task with the list's closed status and a comment saying why."""
        ...


class TaskWriter(TaskBoard, Protocol):
    """The task board, with what keeping a task up to date needs."""

    def update_task(self, *, task_id: str, markdown: str) -> Task:
        """Write a task's description again (idempotent)."""
        ...

    def add_comment(self, *, task_id: str, comment: str) -> None:
        """Add a comment to a task (sent once)."""
        ...

    def comment_texts(self, *, task_id: str) -> list[str]:
        """The texts of a task's newest comments."""
        ...
