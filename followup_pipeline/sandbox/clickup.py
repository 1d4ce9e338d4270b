"""The ClickUp double: tasks of a list (create, search, page), one task, update, comments."""

import hmac
import json
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Scope

from followup_pipeline.sandbox.demo import SALESPEOPLE
from followup_pipeline.sandbox.errors import clickup_error
from followup_pipeline.sandbox.gate import RateDecision
from followup_pipeline.sandbox.state import SandboxState
from followup_pipeline.sandbox.tasks import (
    STATUSES,
    TaskError,
    comment_page,
    filtered,
    new_comment,
    new_task,
    update_task,
)


def rate_limiter(state: SandboxState) -> Any:
    """ClickUp's limit per token: ``clickup_rate_limit`` requests per window, headers always."""

    def decide(scope: Scope) -> RateDecision:
        headers = dict(scope.get("headers", []))
        token = headers.get(b"authorization", b"").decode("latin-1").removeprefix("Bearer ")
        limit = state.config.clickup_rate_limit
        allowed, remaining, reset = state.take_rate(
            f"clickup:{token}", limit, state.config.clickup_rate_window_s
        )
        return RateDecision(
            allowed,
            [
                (b"x-ratelimit-limit", str(limit).encode()),
                (b"x-ratelimit-remaining", str(remaining).encode()),
                (b"x-ratelimit-reset", str(reset).encode()),
            ],
        )

    return decide


def _auth_error(request: Request, state: SandboxState) -> Response | None:
    header = request.headers.get("authorization")
    if not header:
        return clickup_error(401, "Authorization header required", "OAUTH_017")
    token = header.removeprefix("Bearer ")
    expected = state.config.clickup_token.get_secret_value()
    if not hmac.compare_digest(token.encode(), expected.encode()):
        return clickup_error(401, "Token invalid", "OAUTH_025")
    return None


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TaskError(400, "Body must be valid JSON", "INPUT_001") from None


def clickup_app(state: SandboxState) -> Starlette:
    """ClickUp's API v2, to be mounted at ``/clickup/api``."""

    lists = {
        state.config.clickup_list_id: "Follow-ups",
        state.config.clickup_ops_list_id: "Operations",
    }

    def known_list(list_id: str) -> None:
        if list_id not in lists:
            raise TaskError(401, "Team not authorized", "OAUTH_027")

    def stored(task_id: str) -> dict[str, Any]:
        task = state.tasks.get(task_id)
        if task is None:
            raise TaskError(404, "Task not found, deleted", "ITEM_013")
        if task["list"]["id"] not in lists:
            # In a list (a team) this token cannot see: ClickUp answers 401, not 404.
            raise TaskError(401, "Team not authorized", "OAUTH_027")
        return task

    async def create(request: Request) -> Response:
        known_list(request.path_params["list_id"])
        body = await _json(request)
        # Its url is the sandbox's own page of it (the whole app's address, not the mount's).
        task = new_task(state, request.path_params["list_id"], body, str(request.base_url))
        state.tasks[task["id"]] = task
        return JSONResponse(task)

    async def get_list(request: Request) -> Response:
        list_id = request.path_params["list_id"]
        known_list(list_id)
        statuses = [
            {"status": name, "orderindex": index, "color": color, "type": kind}
            for index, (name, kind, color) in enumerate(STATUSES)
        ]
        return JSONResponse({"id": list_id, "name": lists[list_id], "statuses": statuses})

    async def list_members(request: Request) -> Response:
        """Who may be assigned the list's tasks (ClickUp's "Get List Members"): the demo's
        salespeople, as the sandbox's workspace has them."""
        known_list(request.path_params["list_id"])
        members = [
            {"id": clickup_id, "username": name, "email": address, "color": "#7b68ee",
             "initials": "".join(part[0] for part in name.split()), "profilePicture": None}
            for _, name, clickup_id, address in SALESPEOPLE
        ]  # fmt: skip
        return JSONResponse({"members": members})

    async def list_tasks(request: Request) -> Response:
        known_list(request.path_params["list_id"])
        tasks = [
            t for t in state.tasks.values() if t["list"]["id"] == request.path_params["list_id"]
        ]
        page, last = filtered(tasks, request.query_params)
        return JSONResponse({"tasks": page, "last_page": last})

    async def get_task(request: Request) -> Response:
        return JSONResponse(stored(request.path_params["task_id"]))

    async def put_task(request: Request) -> Response:
        task = stored(request.path_params["task_id"])
        update_task(state, task, await _json(request))
        return JSONResponse(task)

    async def add_comment(request: Request) -> Response:
        task = stored(request.path_params["task_id"])
        number = sum(len(kept) for kept in state.comments.values())
        comment = new_comment(state, await _json(request), number)
        state.comments.setdefault(task["id"], []).append(comment)
        # The create answers only the id, the history id and the date (a number here).
        return JSONResponse(
            {"id": comment["id"], "hist_id": comment["hist_id"], "date": int(comment["date"])}
        )

    async def list_comments(request: Request) -> Response:
        task = stored(request.path_params["task_id"])
        page = comment_page(state.comments.get(task["id"], []), request.query_params)
        return JSONResponse({"comments": page})

    def guarded(handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            denied = _auth_error(request, state)
            if denied is not None:
                return denied
            try:
                response: Response = await handler(request)
            except TaskError as error:
                return clickup_error(error.status, error.err, error.ecode)
            return response

        return endpoint

    async def refuse(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return clickup_error(status, "Route not found", "APP_001")

    return Starlette(
        routes=[
            Route("/v2/list/{list_id}", guarded(get_list), methods=["GET"]),
            Route("/v2/list/{list_id}/member", guarded(list_members), methods=["GET"]),
            Route("/v2/list/{list_id}/task", guarded(create), methods=["POST"]),
            Route("/v2/list/{list_id}/task", guarded(list_tasks), methods=["GET"]),
            Route("/v2/task/{task_id}", guarded(get_task), methods=["GET"]),
            Route("/v2/task/{task_id}", guarded(put_task), methods=["PUT"]),
            Route("/v2/task/{task_id}/comment", guarded(add_comment), methods=["POST"]),
            Route("/v2/task/{task_id}/comment", guarded(list_comments), methods=["GET"]),
        ],
        exception_handlers={HTTPException: refuse},
    )
