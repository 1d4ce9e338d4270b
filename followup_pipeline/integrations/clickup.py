"""ClickUp client (API v2): create, find, read, update, comment on and close the follow-up tasks
of one list, and list the tasks changed since a moment (to see which ones people completed).

ClickUp has no idempotency header, so the action's key travels in the task: in a custom field
when its id is configured, else as a tag ``fu-<first 12 hex of sha1(key)>``. Creates are never
retried here; the action ledger searches by key before creating again.
"""

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from followup_pipeline.integrations.errors import (
    IntegrationError,
    NotFoundError,
    PermanentError,
    SchemaError,
    schema_error,
)
from followup_pipeline.integrations.http import (
    DEFAULT_TIMEOUTS,
    Clock,
    Sleep,
    Timeouts,
    VendorHttp,
    build_client,
    collect_pages,
)

VENDOR = "clickup"
KEY_TAG_PREFIX = "fu-"
#: Tasks a page of ``GET /v2/list/{id}/task`` holds at most.
TASK_PAGE_SIZE = 100
#: Status types of a task that is done with (a list's statuses are ``open``, ``custom``,
#: ``done`` or ``closed``).
COMPLETED_TYPES = ("closed", "done")


def key_tag(key: str) -> str:
    """The tag that carries an idempotency key: ``fu-`` and the first 12 hex of its SHA-1."""
    return KEY_TAG_PREFIX + hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:12]


#: What ClickUp answers about a task that is gone or no longer ours: deleted (404, ITEM_013, also
#: as 401), or in a list or team this token cannot see (401 OAUTH_027).
GONE_CODES = ("ITEM_013", "OAUTH_027")


def task_is_gone(error: Exception) -> bool:
    """Whether ``error`` says the task no longer exists for us (closing it is then done)."""
    if isinstance(error, NotFoundError):
        return True
    return (
        isinstance(error, PermanentError)
        and error.status in (401, 404)
        and any(code in error.vendor_message for code in GONE_CODES)
    )


def clickup_message(response: httpx.Response) -> str:
    """ClickUp's error text: ``err`` and ``ECODE`` when the body is JSON, else the raw text."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        return response.text[:300]
    if isinstance(body, dict) and "err" in body:
        return f"{body.get('err')} ({body.get('ECODE', 'no ECODE')})"
    return response.text[:300]


def _ms(value: Any) -> Any:
    """ClickUp sends timestamps as strings of milliseconds since the epoch."""
    if isinstance(value, str | int) and str(value).isdigit():
        try:
            return datetime.fromtimestamp(int(value) / 1000, tz=UTC)
        except (OverflowError, OSError):  # past the year 9999: a value pydantic can name
            raise ValueError(f"milliseconds out of range: {value!r}") from None
    return value


class CustomField(BaseModel):
    """One custom field value of a task."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    name: str | None = None
    type: str | None = None
    value: Any = None


class Task(BaseModel):
    """A ClickUp task, flattened: ``status`` is the status name, ``tags`` the tag names."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    name: str
    status: str
    status_type: str | None = None
    date_created: datetime
    due_date: datetime | None = None
    tags: list[str] = []
    custom_fields: list[CustomField] = []
    url: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _flatten(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and isinstance(raw.get("status"), dict):
            status = raw["status"]
            raw = {**raw, "status": status.get("status"), "status_type": status.get("type")}
        if isinstance(raw, dict) and isinstance(raw.get("tags"), list):
            names = [t.get("name") if isinstance(t, dict) else t for t in raw["tags"]]
            raw = {**raw, "tags": names}
        return raw

    @field_validator("date_created", "due_date", mode="before")
    @classmethod
    def _timestamps(cls, value: Any) -> Any:
        return _ms(value)

    def carries_key(self, idempotency_key: str, key_field_id: str | None) -> bool:
        """Whether this task carries the key, in the custom field or as the tag."""
        if key_field_id is not None:
            fields = self.custom_fields
            return any(f.id == key_field_id and f.value == idempotency_key for f in fields)
        return key_tag(idempotency_key) in self.tags


class TaskChange(BaseModel):
    """A task as the list shows it after a change: its status (name and type) and the moments
    ClickUp stamps (strings of ms): ``date_updated`` always, ``date_done`` once it reached a
    ``done`` or ``closed`` status, ``date_closed`` once it reached the ``closed`` one."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1)
    status: str
    status_type: str
    date_updated: AwareDatetime
    date_closed: AwareDatetime | None = None
    date_done: AwareDatetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _flatten(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and isinstance(raw.get("status"), dict):
            status = raw["status"]
            raw = {**raw, "status": status.get("status"), "status_type": status.get("type")}
        return raw

    @field_validator("date_updated", "date_closed", "date_done", mode="before")
    @classmethod
    def _timestamps(cls, value: Any) -> Any:
        return _ms(value)

    @property
    def completed(self) -> bool:
        """Whether the task is done with: its status is of type ``closed`` or ``done``."""
        return self.status_type in COMPLETED_TYPES

    @property
    def completed_at(self) -> datetime:
        """When it was completed: closed, else done, else (neither stamped) its last update."""
        return self.date_closed or self.date_done or self.date_updated


@dataclass(frozen=True)
class TaskChanges:
    """The tasks of a listing that parsed, and one ``SchemaError`` per task that did not."""

    tasks: list[TaskChange] = field(default_factory=list)
    invalid: list[SchemaError] = field(default_factory=list)


def parse_task(raw: Any) -> Task:
    """A ``Task`` from ClickUp's JSON; ``SchemaError`` naming the task and field otherwise."""
    try:
        return Task.model_validate(raw)
    except ValidationError as exc:
        raise schema_error(raw, exc, vendor=VENDOR) from None


class ClickUpClient:
    """Typed access to the tasks of one ClickUp list."""

    def __init__(
        self,
        base_url: str,
        token: str,
        list_id: str,
        key_field_id: str | None = None,
        closed_status: str | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Sleep = time.sleep,
        clock: Clock = time.time,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        # Personal tokens (pk_…) go as they are; OAuth tokens already carry "Bearer ".
        client = build_client(
            base_url, headers={"Authorization": token}, transport=transport, timeouts=timeouts
        )
        self._http = VendorHttp(
            client, vendor=VENDOR, message_of=clickup_message, sleep=sleep, clock=clock
        )
        self.list_id = list_id
        self.key_field_id = key_field_id
        #: The status that closes a task: configured, else the list's closed-type status.
        self.closed_status = closed_status

    def close(self) -> None:
        """Close the connection pool."""
        self._http.client.close()

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
        """Create a task carrying ``idempotency_key``. One POST, never retried: a timeout raises
        ``TransientError(ambiguous=True)`` and the caller searches with ``find_tasks_by_key``."""
        body: dict[str, Any] = {
            "name": name,
            "markdown_content": markdown,
            "assignees": list(assignees),
            "tags": list(tags),
        }
        if due_date is not None:
            body["due_date"] = int(due_date.timestamp() * 1000)
            body["due_date_time"] = True
        if self.key_field_id is not None:
            body["custom_fields"] = [{"id": self.key_field_id, "value": idempotency_key}]
        else:
            body["tags"].append(key_tag(idempotency_key))
        response = self._http.request("POST", f"v2/list/{self.list_id}/task", json=body)
        return parse_task(self._http.json(response, ambiguous=True))

    def find_tasks_by_key(self, *, idempotency_key: str) -> list[Task]:
        """Every task of the list, closed ones included, that carries ``idempotency_key``."""
        params: dict[str, Any] = {"include_closed": "true"}
        if self.key_field_id is not None:
            # "==" is the exact match; "=" is a fuzzy contains (task:1:1 would find task:1:12).
            condition = {
                "field_id": self.key_field_id,
                "operator": "==",
                "value": idempotency_key,
            }
            params["custom_fields"] = json.dumps([condition])
        else:
            params["tags[]"] = key_tag(idempotency_key)

        def fetch(page: int) -> tuple[list[Task], bool]:
            url = f"v2/list/{self.list_id}/task"
            body = self._http.json(self._http.request("GET", url, params={**params, "page": page}))
            raws = body.get("tasks", []) if isinstance(body, dict) else None
            if not isinstance(raws, list):
                raise PermanentError(
                    f"GET {url} answered no list of tasks", vendor=VENDOR, status=200
                )
            return [parse_task(raw) for raw in raws], not body.get("last_page", True)

        found = collect_pages(fetch)
        return [t for t in found if t.carries_key(idempotency_key, self.key_field_id)]

    def list_tasks_changed_since(self, *, since: datetime) -> TaskChanges:
        """Every task of the list updated after ``since``, closed ones included
        (``include_closed=true``, ``date_updated_gt`` in ms), page by page (0-based, up to 100
        a page) until ``last_page`` or a short page. Our tasks are top-level, so subtasks are
        not asked for. A task that breaks its schema is in ``invalid``, the others parse."""
        params: dict[str, Any] = {
            "include_closed": "true",
            "date_updated_gt": int(since.timestamp() * 1000),
        }
        url = f"v2/list/{self.list_id}/task"

        def fetch(page: int) -> tuple[list[Any], bool]:
            response = self._http.request("GET", url, params={**params, "page": page})
            body = self._http.json(response)
            raws = body.get("tasks") if isinstance(body, dict) else None
            if not isinstance(raws, list):
                raise PermanentError(
                    f"GET {url} answered no list of tasks", vendor=VENDOR, status=200
                )
            more = body.get("last_page") is not True and len(raws) >= TASK_PAGE_SIZE
            return raws, more

        changes = TaskChanges()
        for raw in collect_pages(fetch):
            try:
                changes.tasks.append(TaskChange.model_validate(raw))
            except ValidationError as exc:
                changes.invalid.append(schema_error(raw, exc, vendor=VENDOR))
        return changes

    def get_task(self, *, task_id: str) -> Task:
        """One task; ``NotFoundError`` if it does not exist."""
        return parse_task(self._http.json(self._http.request("GET", f"v2/task/{task_id}")))

    def list_statuses(self) -> dict[str, str]:
        """The list's statuses, name → type (``open``, ``custom``, ``done``, ``closed``)."""
        body = self._http.json(self._http.request("GET", f"v2/list/{self.list_id}"))
        statuses = body.get("statuses") if isinstance(body, dict) else None
        return {
            str(s["status"]): str(s.get("type"))
            for s in statuses or []
            if isinstance(s, dict) and s.get("status")
        }

    def list_members(self) -> dict[int, str]:
        """Who may be assigned the list's tasks: ClickUp user id → username (``GET
        /v2/list/{id}/member``)."""
        body = self._http.json(self._http.request("GET", f"v2/list/{self.list_id}/member"))
        members = body.get("members") if isinstance(body, dict) else None
        return {
            int(m["id"]): str(m.get("username") or m.get("email") or m["id"])
            for m in members or []
            if isinstance(m, dict) and isinstance(m.get("id"), int)
        }

    def list_closed_status(self, statuses: Mapping[str, str] | None = None) -> str:
        """The list's status of type ``closed`` (statuses belong to each list; a new list's is
        ``complete``), read once (or from ``statuses`` already read); ``PermanentError`` if the
        list has none."""
        if self.closed_status is None:
            statuses = self.list_statuses() if statuses is None else statuses
            closed = [name for name, kind in statuses.items() if kind == "closed"]
            if not closed:
                raise PermanentError(
                    f"ClickUp list {self.list_id} has no status of type closed",
                    vendor=VENDOR,
                    status=200,
                )
            self.closed_status = str(closed[0])
        return self.closed_status

    def close_task(self, *, task_id: str, comment: str, closed_status: str | None = None) -> Task:
        """Set the task's status to ``closed_status`` (else the list's closed-type status),
        then add ``comment`` saying why.

        The status change (PUT, idempotent) goes first and may be retried; the comment is a
        POST and is sent once.
        """
        try:
            status = closed_status or self.list_closed_status()
        except IntegrationError as error:
            # About the list, not the task: never to be read as "the task is gone".
            raise PermanentError(
                f"the closed status of list {self.list_id} is unreadable: {error}", vendor=VENDOR
            ) from error
        response = self._http.request("PUT", f"v2/task/{task_id}", json={"status": status})
        task = parse_task(self._http.json(response))
        self.add_comment(task_id=task_id, comment=comment)
        return task

    def update_task(self, *, task_id: str, markdown: str) -> Task:
        """Write a task's description again (``PUT /v2/task/{id}`` with ``markdown_content``,
        which wins over ``description``; idempotent, so it may be retried). Its name, assignees,
        status, due date and custom fields are left as they are."""
        body = {"markdown_content": markdown}
        response = self._http.request("PUT", f"v2/task/{task_id}", json=body)
        return parse_task(self._http.json(response))

    def add_comment(self, *, task_id: str, comment: str) -> None:
        """Add a comment to a task, notifying nobody. A POST, sent once: a lost answer may have
        added it (``comment_texts`` tells)."""
        self._http.request(
            "POST",
            f"v2/task/{task_id}/comment",
            json={"comment_text": comment, "notify_all": False},
        )

    def comment_texts(self, *, task_id: str) -> list[str]:
        """The texts of a task's 25 newest comments (ClickUp's first page, newest first)."""
        body = self._http.json(self._http.request("GET", f"v2/task/{task_id}/comment"))
        comments = body.get("comments") if isinstance(body, dict) else None
        return [str(c.get("comment_text") or "") for c in comments or [] if isinstance(c, dict)]
