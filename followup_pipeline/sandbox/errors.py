"""Each vendor's error shape, as its public contract documents it (docs/vendors.md)."""

import uuid
from datetime import UTC, datetime
from typing import Any

from starlette.responses import HTMLResponse, JSONResponse, Response

#: The only statuses EspoCRM answers errors with.
ESPO_ERROR_STATUSES = frozenset({400, 401, 403, 404, 409, 500, 503})

_ESPO_REASONS = {
    400: "Bad request.",
    401: "Unauthorized.",
    403: "Forbidden.",
    404: "Not found.",
    409: "Conflict.",
    500: "Internal server error.",
    503: "Service unavailable.",
}
_CLICKUP_CODES = {
    400: ("Bad request", "INPUT_000"),
    401: ("Token invalid", "OAUTH_025"),
    403: ("Forbidden", "ACCESS_083"),
    404: ("Not found", "ITEM_013"),
    429: ("Rate limit reached", "APP_002"),
    500: ("Internal server error", "SRV_000"),
}
_GRAPH_CODES = {
    400: "BadRequest",
    401: "InvalidAuthenticationToken",
    403: "ErrorAccessDenied",
    404: "ResourceNotFound",
    429: "ApplicationThrottled",
    500: "InternalServerError",
    503: "ServiceNotAvailable",
    504: "GatewayTimeout",
}


def espo_error(status: int, reason: str | None = None) -> Response:
    """EspoCRM: the status, an empty body, the message in ``X-Status-Reason``."""
    text = reason or _ESPO_REASONS.get(status, "Error.")
    # A header is Latin-1: a reason quoting a client's value must not fail the answer.
    text = text.encode("latin-1", "replace").decode("latin-1")
    return Response(b"", status_code=status, headers={"X-Status-Reason": text})


def clickup_error(status: int, err: str | None = None, ecode: str | None = None) -> Response:
    """ClickUp: ``{"err", "ECODE"}``; gateway errors come as HTML (not every error is JSON)."""
    if status in (502, 503, 504) and err is None:
        return HTMLResponse(f"<html><body><h1>{status} Bad Gateway</h1></body></html>", status)
    default_err, default_code = _CLICKUP_CODES.get(status, ("Error", "SRV_000"))
    return JSONResponse({"err": err or default_err, "ECODE": ecode or default_code}, status)


def graph_error(
    status: int, code: str | None = None, message: str | None = None, retry_after: int | None = None
) -> Response:
    """Microsoft Graph: ``{"error": {"code", "message", "innerError"}}``; 429 with Retry-After."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    body: dict[str, Any] = {
        "error": {
            "code": code or _GRAPH_CODES.get(status, "UnknownError"),
            "message": message or "The service could not process the request.",
            "innerError": {"request-id": str(uuid.uuid4()), "client-request-id": None},
        }
    }
    return JSONResponse(body, status, headers=headers)


def login_error(status: int, error: str, description: str) -> Response:
    """The Microsoft identity platform: ``{"error", "error_description", ...}``."""
    trace, correlation = str(uuid.uuid4()), str(uuid.uuid4())
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    code = int(description.split(":")[0].removeprefix("AADSTS") or 0)
    body = {
        "error": error,
        "error_description": (
            f"{description} Trace ID: {trace} Correlation ID: {correlation} Timestamp: {stamp}"
        ),
        "error_codes": [code],
        "timestamp": stamp,
        "trace_id": trace,
        "correlation_id": correlation,
        "error_uri": f"https://login.microsoftonline.com/error?code={code}",
    }
    return JSONResponse(body, status)


#: The shapes of Mistral's older 401 and 429 bodies, which clients still meet.
LEGACY_MISTRAL = {
    401: {"detail": "Unauthorized"},
    429: {"message": "Requests rate limit exceeded"},
}


def mistral_error(
    status: int,
    message: Any = None,
    kind: str | None = None,
    *,
    legacy: bool = False,
    retry_after: int | None = None,
) -> Response:
    """Mistral: 401 ``{"message": "Unauthorized", ...}``, else ``{"object": "error", ...}``;
    with ``legacy``, the older 401 and 429 shapes; a 429 (or 503) may say ``Retry-After``."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    if legacy and status in LEGACY_MISTRAL:
        return JSONResponse(LEGACY_MISTRAL[status], status, headers=headers)
    if status == 401:
        return JSONResponse({"message": "Unauthorized", "request_id": uuid.uuid4().hex}, 401)
    if status == 429:
        body: dict[str, Any] = {
            "object": "error",
            "message": "Rate limit exceeded",
            "type": "rate_limited",
            "param": None,
            "code": "1300",
        }
        return JSONResponse(body, 429, headers=headers)
    body = {
        "object": "error",
        "message": message or "Internal server error",
        "type": kind or ("invalid_request_message_error" if status < 500 else "internal_error"),
        "param": None,
        "code": None,
    }
    return JSONResponse(body, status, headers=headers)


#: People Data Labs' error types by status (its "Errors & Status Codes" page).
_PDL_ERRORS = {
    400: ("invalid_request_error", "Request contained either missing or invalid parameters"),
    401: ("authentication_error", "Request contained a missing or invalid key"),
    402: ("payment_required", "You have hit your account maximum (all matches used)"),
    403: ("authentication_error", "Request contained a missing or invalid key"),
    404: ("not_found", "No records were found matching your request"),
    405: ("invalid_request_error", "Request method is not allowed on the requested resource"),
    429: ("rate_limit_error", "An error occurred due to requests hitting the API too quick"),
}
_PDL_SERVER_ERROR = (
    "api_error",
    "The server encountered an unexpected condition which prevented it from fulfilling the request",
)


def pdl_error(
    status: int, message: str | None = None, *, retry_after: int | None = None
) -> Response:
    """People Data Labs: ``{"status", "error": {"type", "message"}}``; a 429 may say
    ``Retry-After`` (seconds)."""
    kind, default = _PDL_ERRORS.get(status, _PDL_SERVER_ERROR)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    body = {"status": status, "error": {"type": kind, "message": message or default}}
    return JSONResponse(body, status, headers=headers)


#: Accredible's published error bodies by status (its API reference, "Common Error Formats").
_ACCREDIBLE_ERRORS: dict[int, Any] = {
    400: {"code": 400, "message": "Bad request", "status": "invalid_request", "errors": {}},
    403: {"errors": "Private Certificate, use key"},
    404: {"errors": "Doesn't exist"},
    422: {"errors": "Invalid Group"},
    429: {"errors": "Too many requests"},
    500: {"errors": "Internal server error"},
}


def accredible_error(status: int, body: Any = None) -> Response:
    """Accredible: ``{"errors": …}`` (a text, or field → messages), and a 401 in plain text."""
    if status == 401 and body is None:
        return Response(b"HTTP Token: Access denied.\n", 401, media_type="text/plain")
    if status in (502, 503, 504) and body is None:
        return HTMLResponse(f"<html><body><h1>{status}</h1></body></html>", status)
    chosen = body if body is not None else _ACCREDIBLE_ERRORS.get(status, {"errors": "Error"})
    return JSONResponse(chosen, status)


def vendor_error(
    vendor: str, status: int, retry_after: int = 1, *, legacy_mistral: bool = False
) -> Response:
    """The error an injected fault answers with, in ``vendor``'s shape."""
    if vendor == "pdl":
        return pdl_error(status, retry_after=retry_after if status in (429, 503) else None)
    if vendor == "espocrm":
        return espo_error(status)
    if vendor == "clickup":
        return clickup_error(status)
    if vendor == "graph":
        return graph_error(status, retry_after=retry_after if status in (429, 503) else None)
    if vendor == "accredible":
        return accredible_error(status)
    retry = retry_after if status in (429, 503) else None
    return mistral_error(status, legacy=legacy_mistral, retry_after=retry)
