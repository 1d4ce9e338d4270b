"""The control API under ``/_sandbox``: seed, change, break and inspect the sandbox."""

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from followup_pipeline.sandbox import accredible, moodle_course
from followup_pipeline.sandbox import moodle_demo as moodle
from followup_pipeline.sandbox.config import WebhookSpec
from followup_pipeline.sandbox.demo import demo_data
from followup_pipeline.sandbox.faults import FaultSpec
from followup_pipeline.sandbox.graph_body import mailbox_of, user_id
from followup_pipeline.sandbox.intake import intake_routes
from followup_pipeline.sandbox.records import (
    ACTIVITY_KINDS,
    RecordError,
    add_activity,
    create_deal,
    delete_deal,
    update_deal,
)
from followup_pipeline.sandbox.state import SandboxState

Handler = Callable[[Request], Awaitable[Response]]


def _problem(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status)


def _checked(handler: Handler) -> Handler:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except RecordError as error:
            return _problem(error.status, str(error))
        except ValidationError as error:
            detail = error.errors(include_url=False, include_context=False, include_input=False)
            return JSONResponse({"error": "invalid request", "detail": detail}, 422)
        except (json.JSONDecodeError, TypeError, ValueError) as error:
            return _problem(400, str(error))

    return endpoint


async def _body(request: Request, default: Any = None) -> Any:
    raw = await request.body()
    return json.loads(raw) if raw.strip() else default


def _many(body: Any, key: str) -> list[dict[str, Any]]:
    """Accept one object, a list, or ``{key: [...]}``."""
    if isinstance(body, dict) and isinstance(body.get(key), list):
        body = body[key]
    items = body if isinstance(body, list) else [body]
    if not all(isinstance(item, dict) for item in items):
        raise TypeError(f"expected an object, a list of objects or {{{key!r}: [...]}}")
    return items


def control_app(state: SandboxState) -> Starlette:
    """The control API, to be mounted at ``/_sandbox``."""

    async def reset(request: Request) -> Response:
        body = await _body(request, {})
        state.reset(body.get("seed"))
        deals = []
        if body.get("demo"):
            deals = [
                create_deal(state, d, webhooks=False) for d in demo_data(body.get("seed") or 0)
            ]
            moodle.load_demo(state, body.get("seed") or 0)  # the two Moodle sites
        return JSONResponse({"ok": True, "deals": len(deals)})

    async def create_deals(request: Request) -> Response:
        body = await _body(request)
        emit = not (isinstance(body, dict) and body.get("emit_webhooks") is False)
        created = [create_deal(state, item, webhooks=emit) for item in _many(body, "deals")]
        return JSONResponse({"deals": created}, 201)

    async def list_deals(request: Request) -> Response:
        return JSONResponse({"deals": list(state.deals.values())})

    async def move_stage(request: Request) -> Response:
        body = await _body(request, {})
        deal = update_deal(state, request.path_params["id"], {"stage": body.get("stage")})
        return JSONResponse(deal)

    async def patch_deal(request: Request) -> Response:
        deal = update_deal(state, request.path_params["id"], await _body(request, {}))
        return JSONResponse(deal)

    async def remove_deal(request: Request) -> Response:
        delete_deal(state, request.path_params["id"])
        return JSONResponse({"ok": True})

    def activity(kind: str) -> Handler:
        async def add(request: Request) -> Response:
            items = _many(await _body(request), kind)
            made = [add_activity(state, request.path_params["id"], kind, item) for item in items]
            return JSONResponse({kind: made}, 201)

        return add

    async def add_fault(request: Request) -> Response:
        fault = state.faults.add(FaultSpec.model_validate(await _body(request, {})))
        return JSONResponse(fault.describe(), 201)

    async def list_faults(request: Request) -> Response:
        return JSONResponse({"faults": [fault.describe() for fault in state.faults.active()]})

    async def clear_faults(request: Request) -> Response:
        state.faults.clear()
        return JSONResponse({"ok": True})

    async def clear_fault(request: Request) -> Response:
        if not state.faults.remove(request.path_params["fault_id"]):
            return _problem(404, "no such fault")
        return JSONResponse({"ok": True})

    async def clickup_tasks(request: Request) -> Response:
        return JSONResponse({"tasks": list(state.tasks.values()), "comments": state.comments})

    async def move_task(request: Request) -> Response:
        """Move a task to another list (one this token cannot see), as a person may."""
        task = state.tasks.get(request.path_params["task_id"])
        if task is None:
            return JSONResponse({"error": "no such task"}, 404)
        body = await request.json()
        task["list"] = {**task["list"], "id": str(body.get("list_id", "elsewhere"))}
        return JSONResponse(task)

    async def stages(request: Request) -> Response:
        """The CRM's stage options; PUT replaces them, as an admin renaming a stage would (the
        deals keep theirs)."""
        if request.method == "PUT":
            body = await _body(request, {})
            names = body.get("stages") if isinstance(body, dict) else None
            if (
                not isinstance(names, list)
                or not names
                or not all(isinstance(n, str) and n for n in names)
            ):
                return _problem(400, 'expected {"stages": ["name", ...]}')
            state.config.espocrm_stages[:] = names
        return JSONResponse({"stages": state.config.espocrm_stages})

    def described() -> dict[str, Any]:
        return {"mailboxes": [{"address": a, "id": user_id(a)} for a in state.mailboxes]}

    async def mailboxes(request: Request) -> Response:
        """The Graph tenant's mailboxes; POST adds ``{"address"}`` (or ``{"mailboxes": [...]}``)
        as an admin creating a user would."""
        if request.method == "POST":
            body = await _body(request, {})
            given = body.get("mailboxes") if isinstance(body, dict) else None
            items = given if isinstance(given, list) else [dict(body).get("address")]
            addresses = [a for a in items if isinstance(a, str) and "@" in a]
            if not items or len(addresses) != len(items):
                return _problem(400, 'expected {"address": "user@domain"} or {"mailboxes": [...]}')
            for address in addresses:
                if mailbox_of(address, state.mailboxes) is None:
                    state.mailboxes.append(address)
            return JSONResponse(described(), 201)
        return JSONResponse(described())

    async def remove_mailbox(request: Request) -> Response:
        """Delete a mailbox, as an admin removing a user: sends from it then answer 404."""
        address = mailbox_of(request.path_params["address"], state.mailboxes)
        if address is None:
            return _problem(404, "no such mailbox")
        state.mailboxes.remove(address)
        return JSONResponse(described())

    async def outbox(request: Request) -> Response:
        return JSONResponse({"messages": state.outbox})

    async def model_requests(request: Request) -> Response:
        return JSONResponse({"requests": state.model_requests})

    async def stats(request: Request) -> Response:
        requests = {vendor: dict(counter) for vendor, counter in state.stats.items()}
        total = sum(sum(counter.values()) for counter in state.stats.values())
        writes = {vendor: dict(counter) for vendor, counter in state.writes.items()}
        return JSONResponse({"requests": requests, "total": total, "writes": writes})

    async def webhooks(request: Request) -> Response:
        hub = state.webhooks
        return JSONResponse(
            {
                "url": hub.url,
                "webhooks": [{"id": h.id, "event": h.event} for h in hub.webhooks],
                "queue": [
                    {"webhook_id": i.webhook_id, "attempts": i.attempts, "data": i.data}
                    for i in hub.queue
                ],
                "deliveries": hub.deliveries,
            }
        )

    async def configure_webhooks(request: Request) -> Response:
        body = await _body(request, {})
        if "url" in body:
            state.webhooks.url = body["url"]
        if "webhooks" in body:
            state.webhooks.webhooks = [WebhookSpec.model_validate(h) for h in body["webhooks"]]
        return await webhooks(request)

    async def flush(request: Request) -> Response:
        body = await _body(request, {})
        results = await state.webhooks.flush(only_due=bool(body.get("only_due", False)))
        return JSONResponse({"deliveries": results})

    async def clock(request: Request) -> Response:
        if request.method == "POST":
            body = await _body(request, {})
            if body.get("now"):
                state.clock.set(datetime.fromisoformat(body["now"]))
            state.clock.advance(float(body.get("advance_seconds", 0)))
        return JSONResponse({"now": state.clock.now().isoformat()})

    routes = [
        Route("/reset", reset, methods=["POST"]),
        *moodle_routes(state),
        *accredible.control_routes(state),
        Route("/deals", create_deals, methods=["POST"]),
        Route("/deals", list_deals, methods=["GET"]),
        Route("/deals/{id}", patch_deal, methods=["PATCH"]),
        Route("/deals/{id}", remove_deal, methods=["DELETE"]),
        Route("/deals/{id}/stage", move_stage, methods=["POST"]),
        *(
            Route(f"/deals/{{id}}/{kind}", activity(kind), methods=["POST"])
            for kind in ACTIVITY_KINDS
        ),
        Route("/faults", add_fault, methods=["POST"]),
        Route("/faults", list_faults, methods=["GET"]),
        Route("/faults", clear_faults, methods=["DELETE"]),
        Route("/faults/{fault_id}", clear_fault, methods=["DELETE"]),
        Route("/clickup/tasks", clickup_tasks, methods=["GET"]),
        Route("/clickup/tasks/{task_id}/move", move_task, methods=["POST"]),
        Route("/outbox", outbox, methods=["GET"]),
        Route("/mailboxes", mailboxes, methods=["GET", "POST"]),
        Route("/mailboxes/{address}", remove_mailbox, methods=["DELETE"]),
        Route("/mistral/requests", model_requests, methods=["GET"]),
        Route("/stats", stats, methods=["GET"]),
        Route("/webhooks", webhooks, methods=["GET"]),
        Route("/webhooks", configure_webhooks, methods=["POST"]),
        Route("/webhooks/flush", flush, methods=["POST"]),
        Route("/clock", clock, methods=["GET", "POST"]),
        Route("/stages", stages, methods=["GET", "PUT"]),
        *intake_routes(state),
    ]
    return Starlette(
        routes=[Route(r.path, _checked(r.endpoint), methods=r.methods) for r in routes]
    )


def moodle_routes(state: SandboxState) -> list[Route]:
    """``/moodle/{site}/…``: a Moodle site's world, seeded and changed (``moodle_demo.py``)."""

    async def sites(request: Request) -> Response:
        listed = []
        for name in state.config.moodle_tokens:
            world = moodle.known(state, name)
            counts = {t: len(world[t]) for t in ("courses", "users", "quizzes", "messages")}
            listed.append({"site": name, "path": f"/moodle/{name}", **counts})
        return JSONResponse({"sites": listed})

    async def site(request: Request) -> Response:
        name = request.path_params["site"]
        if request.method == "PATCH":
            return JSONResponse(moodle.set_site(state, name, await _body(request, {})))
        return JSONResponse(moodle.known(state, name))

    def adding(table: str, add: Callable[[SandboxState, str, dict[str, Any]], Any]) -> Handler:
        async def handler(request: Request) -> Response:
            name = request.path_params["site"]
            made = [add(state, name, item) for item in _many(await _body(request), table)]
            return JSONResponse({table: made}, 201)

        return handler

    def on_quiz(change: Callable[..., Any], status: int = 200) -> Handler:
        async def handler(request: Request) -> Response:
            params = request.path_params
            body = await _body(request, {})
            return JSONResponse(change(state, params["site"], params["quiz_id"], body), status)

        return handler

    async def messages(request: Request) -> Response:
        return JSONResponse(
            {"messages": moodle.known(state, request.path_params["site"])["messages"]}
        )

    async def read(request: Request) -> Response:
        params = request.path_params
        return JSONResponse(moodle.read_message(state, params["site"], params["message_id"]))

    async def course(request: Request) -> Response:
        params = request.path_params
        body = await _body(request, {})
        changed = moodle_course.set_course(state, params["site"], params["course_id"], body)
        return JSONResponse(changed)

    add_module = moodle_course.add_module
    quiz = "/moodle/{site}/quizzes/{quiz_id:int}"
    return [
        Route("/moodle", sites, methods=["GET"]),
        Route("/moodle/{site}", site, methods=["GET", "PATCH"]),
        Route("/moodle/{site}/courses", adding("courses", moodle.add_course), methods=["POST"]),
        Route("/moodle/{site}/users", adding("users", moodle.add_user), methods=["POST"]),
        Route("/moodle/{site}/enrolments", adding("enrolments", moodle.enrol), methods=["POST"]),
        Route("/moodle/{site}/quizzes", adding("quizzes", moodle.add_quiz), methods=["POST"]),
        Route("/moodle/{site}/modules", adding("modules", add_module), methods=["POST"]),
        Route("/moodle/{site}/courses/{course_id:int}", course, methods=["PATCH"]),
        Route(quiz, on_quiz(moodle.change_quiz), methods=["PATCH"]),
        Route(f"{quiz}/complete", on_quiz(moodle.complete_quiz, 201), methods=["POST"]),
        Route(f"{quiz}/attempts", on_quiz(moodle.attempt, 201), methods=["POST"]),
        Route("/moodle/{site}/messages", messages, methods=["GET"]),
        Route("/moodle/{site}/messages/{message_id:int}/read", read, methods=["POST"]),
    ]
