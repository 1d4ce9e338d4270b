"""ClickUp task objects: built from a create body, updated, filtered and paged."""

import json
from typing import Any

from followup_pipeline.sandbox.state import SandboxState

Task = dict[str, Any]
PAGE_SIZE = 100

#: The statuses of a new ClickUp list: name, type, colour (the closed one is ``complete``).
STATUSES = [
    ("to do", "open", "#d3d3d3"),
    ("complete", "closed", "#6bc950"),
]
PRIORITIES = {
    1: ("urgent", "#f50000"),
    2: ("high", "#ffcc00"),
    3: ("normal", "#6fddff"),
    4: ("low", "#d8d8d8"),
}
SANDBOX_USER_ID = 81940001
SANDBOX_USER = {"id": SANDBOX_USER_ID, "username": "Sandbox Bot", "email": "bot@example.com"}
#: Where the sandbox shows a task to people (``pages.py``), below its own address: the task's
#: ``url`` (ClickUp's is ``https://app.clickup.com/t/{id}``).
TASK_PAGE = "/clickup/t/{task_id}"


def task_url(base_url: str, task_id: str) -> str:
    """The address of a task's page on the sandbox at ``base_url``."""
    return base_url.rstrip("/") + TASK_PAGE.format(task_id=task_id)


class TaskError(ValueError):
    """A request ClickUp refuses: status, ``err`` and ``ECODE``."""

    def __init__(self, status: int, err: str, ecode: str) -> None:
        super().__init__(err)
        self.status, self.err, self.ecode = status, err, ecode


def status_object(name: str) -> dict[str, Any]:
    """The ``status`` object of a status name (case-insensitive); TaskError if unknown."""
    for index, (status, kind, color) in enumerate(STATUSES):
        if status == name.lower():
            return {"status": status, "color": color, "type": kind, "orderindex": index}
    raise TaskError(400, "Status does not exist", "CRTSK_001")


def _priority(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, int) or value not in PRIORITIES:
        raise TaskError(400, "Priority invalid", "INPUT_004")
    name, color = PRIORITIES[value]
    return {"id": str(value), "priority": name, "color": color, "orderindex": str(value)}


def _due(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TaskError(400, "Due date invalid", "INPUT_003")
    return str(value)


def _custom_fields(state: SandboxState, given: Any, current: list[Task]) -> list[Task]:
    if not isinstance(given, list):
        raise TaskError(400, "Custom fields must be an array", "FIELD_001")
    values = {field["id"]: field.get("value") for field in current if "value" in field}
    known = {spec.id for spec in state.config.clickup_custom_fields}
    for item in given:
        if not isinstance(item, dict) or item.get("id") not in known:
            raise TaskError(400, "Custom field id is invalid", "FIELD_033")
        values[item["id"]] = item.get("value")
    fields = []
    for spec in state.config.clickup_custom_fields:
        field: Task = {"id": spec.id, "name": spec.name, "type": spec.type, "type_config": {}}
        if values.get(spec.id) is not None:
            field["value"] = values[spec.id]
        fields.append(field)
    return fields


def new_task(state: SandboxState, list_id: str, body: Any, base_url: str) -> Task:
    """The task a valid create body makes (not yet stored), its ``url`` its page on the sandbox
    at ``base_url``; TaskError if ClickUp would refuse."""
    if not isinstance(body, dict):
        raise TaskError(400, "Body must be a JSON object", "INPUT_001")
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        raise TaskError(400, "Task name invalid", "INPUT_005")
    tags, assignees = body.get("tags", []), body.get("assignees", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TaskError(400, "Tags must be an array of strings", "INPUT_006")
    if not isinstance(assignees, list) or not all(isinstance(a, int) for a in assignees):
        raise TaskError(400, "Assignees must be an array of user ids", "INPUT_007")
    description = body.get("markdown_content") or body.get("description") or ""
    now = str(state.clock.millis())
    task_id = "86" + "".join(
        state.rng.choice("0123456789abcdefghijkmnpqrstuvwxyz") for _ in range(7)
    )
    return {
        "id": task_id,
        "custom_id": None,
        "name": name,
        "text_content": description,
        "description": description,
        "status": status_object(body.get("status") or STATUSES[0][0]),
        "orderindex": f"{len(state.tasks) + 1}.00000000000000000000000000000000",
        "date_created": now,
        "date_updated": now,
        "date_closed": None,
        "date_done": None,
        "archived": False,
        "creator": {**SANDBOX_USER, "color": "#7b68ee", "profilePicture": None},
        "assignees": [
            {
                "id": a,
                "username": f"user{a}",
                "email": f"user{a}@example.com",
                "color": "#7b68ee",
                "initials": "U",
                "profilePicture": None,
            }
            for a in assignees
        ],
        "watchers": [],
        "checklists": [],
        "tags": [
            {
                "name": t.lower(),
                "tag_fg": "#800000",
                "tag_bg": "#800000",
                "creator": SANDBOX_USER["id"],
            }
            for t in tags
        ],
        "parent": None,
        "priority": _priority(body.get("priority")),
        "due_date": _due(body.get("due_date")),
        "due_date_time": bool(body.get("due_date_time", False)),
        "start_date": None,
        "points": None,
        "time_estimate": None,
        "custom_fields": _custom_fields(state, body.get("custom_fields", []), []),
        "dependencies": [],
        "linked_tasks": [],
        "team_id": "9012000001",
        "url": task_url(base_url, task_id),
        "permission_level": "create",
        "list": {"id": list_id, "name": "Follow-ups", "access": True},
        "folder": {"id": "90120000002", "name": "hidden", "hidden": True, "access": True},
        "space": {"id": "90120000003"},
    }


def update_task(state: SandboxState, task: Task, body: Any) -> None:
    """Apply a ``PUT /v2/task/{id}`` body to a stored task; TaskError if ClickUp would refuse."""
    if not isinstance(body, dict):
        raise TaskError(400, "Body must be a JSON object", "INPUT_001")
    if "custom_fields" in body:  # PUT cannot set custom fields (ClickUp has its own route)
        raise TaskError(400, "Custom fields cannot be updated on this route", "INPUT_012")
    now = str(state.clock.millis())
    if "name" in body:
        if not isinstance(body["name"], str) or not body["name"].strip():
            raise TaskError(400, "Task name invalid", "INPUT_005")
        task["name"] = body["name"]
    text = body.get("markdown_content") or body.get("description")
    if isinstance(text, str):
        task["description"] = task["text_content"] = text
    if "status" in body:
        task["status"] = status_object(str(body["status"]))
        closed = task["status"]["type"] in ("closed", "done")
        task["date_closed"] = now if task["status"]["type"] == "closed" else None
        task["date_done"] = now if closed else None
    if "priority" in body:
        task["priority"] = _priority(body["priority"])
    if "due_date" in body:
        task["due_date"] = _due(body["due_date"])
    if "archived" in body:
        task["archived"] = bool(body["archived"])
    task["date_updated"] = now


def _field_matches(task: Task, rule: Any) -> bool:
    """ClickUp's custom-field filter on text: ``=`` is a fuzzy contains (case-insensitive) and
    ``!=`` its negation, ``==`` the exact match and ``!==`` its negation (developer.clickup.com,
    task filters)."""
    operator = rule.get("operator", "=") if isinstance(rule, dict) else None
    if operator not in ("=", "!=", "==", "!=="):
        raise TaskError(400, "Custom field filter invalid", "FIELD_050")
    value = next(
        (f.get("value") for f in task["custom_fields"] if f["id"] == rule.get("field_id")), None
    )
    if operator in ("=", "!="):
        contains = value is not None and str(rule.get("value")).lower() in str(value).lower()
        return contains if operator == "=" else not contains
    equal = value is not None and str(value) == str(rule.get("value"))
    return equal if operator == "==" else not equal


#: The date filters of ``GET /v2/list/{id}/task``: Unix milliseconds, strictly greater (``_gt``)
#: or less (``_lt``) than the task's date; a task without that date (not done) never matches.
DATE_FILTERS = {
    f"{field}_{side}": (field, side)
    for field in ("date_created", "date_updated", "date_done")
    for side in ("gt", "lt")
}


#: The date filters of a request: filter name → (the task's field, ``gt`` or ``lt``, the bound).
DateBounds = dict[str, tuple[str, str, int]]


def _dates_match(task: Task, bounds: DateBounds) -> bool:
    """Whether the task's dates are within every bound asked."""
    for field, side, limit in bounds.values():
        value = task.get(field)
        if value is None:
            return False
        if not (int(value) > limit if side == "gt" else int(value) < limit):
            return False
    return True


def _date_bounds(params: Any) -> DateBounds:
    """The date filters of the query; TaskError when one is not a number of milliseconds."""
    bounds: DateBounds = {}
    for name, (field, side) in DATE_FILTERS.items():
        text = params.get(name)
        if text is None:
            continue
        if not text.lstrip("-").isdigit():
            raise TaskError(400, f"{name} must be Unix time in milliseconds", "INPUT_009")
        bounds[name] = (field, side, int(text))
    return bounds


def filtered(tasks: list[Task], params: Any) -> tuple[list[Task], bool]:
    """One page of a list's tasks under ClickUp's query filters, and whether it is the last."""
    page_text = params.get("page", "0")
    if not page_text.isdigit():
        raise TaskError(400, "Page must be a non-negative integer", "INPUT_009")
    bounds = _date_bounds(params)
    subtasks = params.get("subtasks", "false").lower() == "true"
    rules: Any = []
    if params.get("custom_fields"):
        try:
            rules = json.loads(params["custom_fields"])
        except json.JSONDecodeError:
            raise TaskError(400, "Custom field filter must be JSON", "FIELD_050") from None
        if not isinstance(rules, list):
            raise TaskError(400, "Custom field filter must be an array", "FIELD_050")
    tags = {t.lower() for t in params.getlist("tags[]")}
    statuses = {s.lower() for s in params.getlist("statuses[]")}
    include_closed = params.get("include_closed", "false").lower() == "true"
    chosen = [
        task
        for task in tasks
        if (include_closed or task["status"]["type"] != "closed")
        and not task["archived"]
        and (subtasks or task["parent"] is None)
        and _dates_match(task, bounds)
        and (not tags or tags & {t["name"] for t in task["tags"]})
        and (not statuses or task["status"]["status"] in statuses)
        and all(_field_matches(task, rule) for rule in rules)
    ]
    order = {
        "id": "id",
        "created": "date_created",
        "updated": "date_updated",
        "due_date": "due_date",
    }
    key = order.get(params.get("order_by", "created"), "date_created")
    chosen.sort(key=lambda t: (int(t[key]) if key != "id" and t[key] else 0, t["id"]))
    if params.get("reverse", "false").lower() != "true":
        chosen.reverse()
    start = int(page_text) * PAGE_SIZE
    return chosen[start : start + PAGE_SIZE], start + PAGE_SIZE >= len(chosen)


#: How many comments ``GET /v2/task/{id}/comment`` answers at most, newest first.
COMMENT_PAGE = 25


def _person(user_id: int) -> dict[str, Any]:
    """A ClickUp user object as comments carry it."""
    if user_id == SANDBOX_USER_ID:
        return {**SANDBOX_USER, "color": "#7b68ee", "initials": "SB", "profilePicture": None}
    return {
        "id": user_id,
        "username": f"user{user_id}",
        "email": f"user{user_id}@example.com",
        "color": "#7b68ee",
        "initials": "U",
        "profilePicture": None,
    }


def new_comment(state: SandboxState, body: Any, number: int) -> Task:
    """The comment a ``POST /v2/task/{id}/comment`` body makes, as ``GET …/comment`` shows it;
    its ``number`` among all comments makes ids that grow as ClickUp's do. TaskError if ClickUp
    would refuse the body."""
    if not isinstance(body, dict):
        raise TaskError(400, "Body must be a JSON object", "INPUT_001")
    text = body.get("comment_text")
    if text is None and isinstance(body.get("comment"), list):  # the rich-text form
        parts = body["comment"]
        if all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts):
            text = "".join(p["text"] for p in parts)
    if not isinstance(text, str) or not text:
        raise TaskError(400, "Comment text invalid", "INPUT_010")
    if not isinstance(body.get("notify_all"), bool):  # required by ClickUp's schema
        raise TaskError(400, "notify_all must be a boolean", "INPUT_011")
    assignee = body.get("assignee")
    if assignee is not None and (isinstance(assignee, bool) or not isinstance(assignee, int)):
        raise TaskError(400, "Assignee must be a user id", "INPUT_007")
    if body.get("group_assignee") is not None:  # a user group: the sandbox's workspace has none
        raise TaskError(400, "Group assignees are not served by the sandbox", "SANDBOX_001")
    return {
        "id": str(90120000000000 + number * 1000 + state.rng.randrange(1000)),
        "hist_id": state.new_id(8),
        "comment": [{"text": text}],
        "comment_text": text,
        "user": _person(SANDBOX_USER_ID),
        "resolved": False,
        "assignee": None if assignee is None else _person(assignee),
        "assigned_by": None if assignee is None else _person(SANDBOX_USER_ID),
        "reactions": [],
        "date": str(state.clock.millis()),
        "reply_count": 0,
    }


def comment_page(comments: list[Task], params: Any) -> list[Task]:
    """``GET /v2/task/{id}/comment``: the 25 newest comments; with ``start`` (a comment's
    ``date``) and ``start_id`` (its ``id``), the 25 that come after that comment, older ones
    (developer.clickup.com, task comments pagination)."""
    start_text, start_id = params.get("start"), params.get("start_id")
    newest = sorted(comments, key=lambda c: (int(c["date"]), int(c["id"])), reverse=True)
    if start_text is not None:
        if not start_text.isdigit():
            raise TaskError(400, "Start must be a date in Unix milliseconds", "INPUT_009")
        if start_id is not None and not start_id.isdigit():
            raise TaskError(400, "Start id must be a comment id", "INPUT_009")
        mark = (int(start_text), int(start_id) if start_id is not None else 10**30)
        newest = [c for c in newest if (int(c["date"]), int(c["id"])) < mark]
    elif start_id is not None:
        raise TaskError(400, "start_id needs start", "INPUT_009")
    return [{k: v for k, v in c.items() if k != "hist_id"} for c in newest[:COMMENT_PAGE]]
