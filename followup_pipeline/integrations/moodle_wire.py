"""How a call to Moodle's web services travels (``moodle.py`` makes the calls): its parameters
as PHP reads a form, Moodle's errors (HTTP 200 with ``{"exception", "errorcode", "message",
"debuginfo"?}``) as the client's, and the records of an answer validated one by one.
The contract: docs/vendors.md."""

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from followup_pipeline.integrations.errors import (
    IntegrationError,
    PermanentError,
    SchemaError,
    TransientError,
    schema_error,
)
from followup_pipeline.integrations.moodle_models import Records

VENDOR = "moodle"

M = TypeVar("M", bound=BaseModel)


class MoodleError(PermanentError):
    """Moodle refused the call (an ``exception`` in an HTTP 200): ``errorcode`` says why
    (None when the exception has none), ``debuginfo`` more when the site debugs."""

    def __init__(self, message: str, *, function: str, body: Mapping[str, Any]) -> None:
        code, said = body.get("errorcode"), str(body.get("message", ""))[:300]
        self.errorcode = code if isinstance(code, str) else None
        super().__init__(
            message, vendor=VENDOR, status=200, vendor_message=f"{self.errorcode}: {said}"
        )
        self.function, self.exception = function, str(body.get("exception", ""))
        info = body.get("debuginfo")
        self.debuginfo = info if isinstance(info, str) else None


class MoodleTokenError(MoodleError):
    """``invalidtoken``: the site knows no such token. A configuration problem, the same for
    every call, so the caller stops rather than skipping one learner."""


class MoodleAccessError(MoodleError):
    """``accessexception``: the function is not in the token's service (or the token expired,
    is IP-restricted, or its user lacks ``webservice/rest:use``); ``debuginfo`` says which."""


def form_fields(params: Mapping[str, Any]) -> dict[str, str]:
    """Parameters as PHP reads a form: nested keys in brackets, booleans 1/0; an empty list
    sends nothing (Moodle cannot receive one; its default applies)."""
    fields: dict[str, str] = {}

    def put(name: str, value: Any) -> None:
        if isinstance(value, bool):
            fields[name] = "1" if value else "0"
        elif isinstance(value, int | str):
            fields[name] = str(value)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                put(f"{name}[{key}]", item)
        elif isinstance(value, Sequence):
            for index, item in enumerate(value):
                put(f"{name}[{index}]", item)
        else:
            raise TypeError(f"{name}: Moodle takes no {type(value).__name__}")

    for key, value in params.items():
        put(key, value)
    return fields


def moodle_message(response: httpx.Response) -> str:
    """The text of a failed HTTP answer: the web server's page, without its tags."""
    return " ".join(re.sub(r"<[^>]+>", " ", response.text).split())[:200]


def listed(body: Any, key: str) -> tuple[list[Any], list[Any]]:
    """The records under ``key`` of an answer ``{key: [...], "warnings": [...]}``."""
    if not isinstance(body, dict) or not isinstance(body.get(key), list):
        problem = f"expected an object with a list {key!r}"
        raise SchemaError(vendor=VENDOR, record_id=None, field=key, problem=problem, raw=body)
    warnings = body.get("warnings")
    return body[key], warnings if isinstance(warnings, list) else []


def a_list(body: Any, what: str) -> list[Any]:
    """An answer that is a list of records (``what`` they are), or a ``SchemaError``."""
    if not isinstance(body, list):
        problem = f"expected a list of {what}"
        raise SchemaError(
            vendor=VENDOR, record_id=None, field="<answer>", problem=problem, raw=body
        )
    return body


def records(model: type[M], raws: list[Any], warnings: Sequence[Any] = ()) -> Records[M]:
    """Each record validated on its own, so one bad record does not spoil the listing."""
    valid: list[M] = []
    invalid: list[SchemaError] = []
    for raw in raws:
        try:
            valid.append(model.model_validate(raw))
        except ValidationError as exc:
            invalid.append(schema_error(raw, exc, vendor=VENDOR))
    return Records(valid, invalid=invalid, warnings=warnings)


def one(model: type[M], raw: Any) -> M:
    """A single record of an answer, or the ``SchemaError`` naming its broken field."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise schema_error(raw, exc, vendor=VENDOR) from None


def moodle_error(function: str, body: dict[str, Any]) -> IntegrationError:
    """The error an answer ``{"exception", "errorcode", "message", "debuginfo"?}`` means."""
    code, said = body.get("errorcode"), str(body.get("message", ""))[:300]
    if code == "invalidtoken":
        return MoodleTokenError(
            f"{function}: the token is wrong ({code}: {said})", function=function, body=body
        )
    if code == "accessexception":
        text = f"{function} is not allowed for this token: not in its service, or the token "
        text += f"expired or is restricted ({code}: {said})"
        return MoodleAccessError(text, function=function, body=body)
    if code == "sitemaintenance":  # Moodle: "this is usually temporary"
        text = f"{function}: the site is in maintenance mode ({code}: {said})"
        return TransientError(text, vendor=VENDOR, status=200)
    what = code if isinstance(code, str) else body.get("exception")
    return MoodleError(f"{function}: {what}: {said}", function=function, body=body)
