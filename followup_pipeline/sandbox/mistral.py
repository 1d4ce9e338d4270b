"""The Mistral double: ``POST /v1/chat/completions`` with a deterministic summariser."""

import hmac
import json
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from followup_pipeline.sandbox.errors import mistral_error
from followup_pipeline.sandbox.gate import INVALID_OUTPUT_KEY
from followup_pipeline.sandbox.state import SandboxState
from followup_pipeline.sandbox.summary import model_output

ROLES = {"system", "user", "assistant", "tool"}
FORMATS = {"text", "json_object", "json_schema"}
#: What ``GET /v1/models`` lists.
MODELS = ("mistral-small-latest", "mistral-medium-latest", "mistral-large-latest")


def _problem(loc: list[str | int], kind: str, msg: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "loc": ["body", *loc], "msg": msg, "input": value}


def validation_problems(body: Any) -> list[dict[str, Any]]:
    """What Mistral's validation would reject in a chat-completion body (FastAPI-style)."""
    if not isinstance(body, dict):
        return [_problem([], "model_attributes_type", "Input should be an object", body)]
    problems = []
    if not isinstance(body.get("model"), str) or not body.get("model"):
        problems.append(_problem(["model"], "missing", "Field required", body.get("model")))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append(_problem(["messages"], "missing", "Field required", messages))
    else:
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") not in ROLES:
                problems.append(
                    _problem(["messages", index], "union_tag_invalid", "Bad role", message)
                )
            elif not isinstance(message.get("content"), str | list):
                problems.append(
                    _problem(
                        ["messages", index, "content"],
                        "string_type",
                        "Input should be a valid string",
                        message,
                    )
                )
    temperature = body.get("temperature")
    if temperature is not None and not (
        isinstance(temperature, int | float) and 0 <= temperature <= 1.5
    ):
        problems.append(
            _problem(["temperature"], "less_than_equal", "Input should be ≤ 1.5", temperature)
        )
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and not (isinstance(max_tokens, int) and max_tokens >= 0):
        problems.append(
            _problem(["max_tokens"], "int_type", "Input should be a valid integer", max_tokens)
        )
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") not in FORMATS):
        problems.append(
            _problem(
                ["response_format"], "enum", "Input should be text, json_object or json_schema", fmt
            )
        )
    elif isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema")
        if (
            not isinstance(spec, dict)
            or not isinstance(spec.get("name"), str)
            or not isinstance(spec.get("schema"), dict)
        ):
            problems.append(
                _problem(["response_format", "json_schema"], "missing", "Field required", spec)
            )
    return problems


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def mistral_app(state: SandboxState) -> Starlette:
    """Mistral's API, to be mounted at ``/mistral``."""

    def authorised(request: Request) -> bool:
        header = request.headers.get("authorization", "")
        expected = f"Bearer {state.config.mistral_api_key.get_secret_value()}"
        return hmac.compare_digest(header.encode(), expected.encode())

    async def list_models(request: Request) -> Response:
        """``GET /v1/models``: the models this key may use (what a key check reads)."""
        if not authorised(request):
            return mistral_error(401, legacy=state.config.mistral_legacy_errors)
        created = int(state.clock.now().timestamp())
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": created,
                        "owned_by": "mistralai",
                        "type": "base",
                        "capabilities": {"completion_chat": True, "function_calling": True},
                        "max_context_length": 131072,
                    }
                    for name in MODELS
                ],
            }
        )

    async def completions(request: Request) -> Response:
        if not authorised(request):
            return mistral_error(401, legacy=state.config.mistral_legacy_errors)
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        problems = validation_problems(body)
        if problems:
            return mistral_error(422, {"detail": problems})
        state.model_requests.append(body)
        content = request.scope.get(INVALID_OUTPUT_KEY) or model_output(
            body["messages"], body.get("response_format")
        )
        prompt = sum(_tokens(str(m.get("content", ""))) + 4 for m in body["messages"])
        completion, finish = _tokens(content), "stop"
        if body.get("max_tokens") is not None and completion > body["max_tokens"]:
            content, completion, finish = (
                content[: body["max_tokens"] * 4],
                body["max_tokens"],
                "length",
            )
        return JSONResponse(
            {
                "id": state.new_id(32),
                "object": "chat.completion",
                "model": body["model"],
                "created": int(state.clock.now().timestamp()),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "tool_calls": None},
                        "finish_reason": finish,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )

    async def refuse(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return mistral_error(status, "Not Found" if status == 404 else "Method Not Allowed")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
        ],
        exception_handlers={HTTPException: refuse},
    )
