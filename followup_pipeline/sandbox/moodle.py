"""The Moodle double: ``/moodle/{site}/webservice/rest/server.php``, a Moodle site per tenant.

It reads a request as Moodle's REST server does (docs/vendors.md): the fields of the query and
of a form body merged (the body wins), PHP's brackets read as arrays (``courseids[0]=5``); the
``wstoken`` checked against the site's (``SandboxConfig.moodle_tokens``), then the maintenance
mode, then ``wsfunction`` (unknown: ``invalidrecord``; not in the token's service:
``accessexception``), then the parameters against the function's declaration (missing, of the
wrong type or undeclared: ``invalidparameter``). Errors are HTTP 200 with ``{"exception",
"errorcode", "message"}``, and ``debuginfo`` when the site debugs; answers are ``json_encode``'s
(``\\/``, ``\\uXXXX``), or XML without ``moodlewsrestformat=json``. The functions' answers are
``moodle_functions.py``'s, ``moodle_course.py``'s and ``moodle_users.py``'s. An HTTP error (a
fault, a path no site serves) is the web server's page, not JSON.
"""

import hmac
import html
import json
import re
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from followup_pipeline.sandbox.gate import VendorGate
from followup_pipeline.sandbox.moodle_call import Call, MoodleException, invalid, missing
from followup_pipeline.sandbox.moodle_course import COURSE_FUNCTIONS
from followup_pipeline.sandbox.moodle_demo import site_world
from followup_pipeline.sandbox.moodle_functions import FUNCTIONS
from followup_pipeline.sandbox.moodle_users import USER_FUNCTIONS
from followup_pipeline.sandbox.state import Record, SandboxState

#: Every function the double answers.
SERVED_FUNCTIONS = {**FUNCTIONS, **COURSE_FUNCTIONS, **USER_FUNCTIONS}
#: Functions Moodle has that the double does not serve: never in a token's service here.
UNSERVED = (
    "core_course_edit_module",
    "core_course_get_updates_since",
    "core_message_get_conversation_messages",
    "core_message_get_user_message_preferences",
    "core_message_get_user_notification_preferences",
    "core_user_get_user_preferences",
    "mod_quiz_get_user_attempts",
)
#: ``debuginfo`` of ``accessexception`` for a function not in the token's service
#: (``webservice/lib.php``), spaces and all.
ACCESS_DEBUGINFO = """Access to the function {}() is not allowed.
                     There could be multiple reasons for this:
                     1. The service linked to the user token does not contain the function.
                     2. The service is user-restricted and the user is not listed.
                     3. The service is IP-restricted and the user IP is not listed.
                     4. The service is time-restricted and the time has expired.
                     5. The token is time-restricted and the time has expired.
                     6. The service requires a specific capability which the user does not have.
                     7. The function is called with username/password (no user token is sent)
                     and none of the services has the function to allow the user.
                     These settings can be found in Administration > Site administration
                     > Server > Web services > External services and Manage tokens."""
SITE_MAINTENANCE = "The site is undergoing maintenance and is currently not available"
REQUIRED, OPTIONAL = "<required>", "<optional>"
_OPTION = {"name": ("alphanumext", REQUIRED), "value": ("raw", REQUIRED)}
_MESSAGE = {
    "touserid": ("int", REQUIRED),
    "text": ("raw", REQUIRED),
    "textformat": ("int", 0),
    "clientmsgid": ("alphanumext", OPTIONAL),
}
#: Each served function's parameters as it declares them: ``{key: (type, default)}``, where a
#: type is a PARAM_ name, a structure (a dict, the same way) or ``[type]`` (a list), and the
#: default is ``REQUIRED``, ``OPTIONAL`` or the value.
PARAMETERS: dict[str, dict[str, tuple[Any, Any]]] = {
    "core_webservice_get_site_info": {"serviceshortnames": (["alphanumext"], [])},
    "core_enrol_get_enrolled_users": {"courseid": ("int", REQUIRED), "options": ([_OPTION], [])},
    "mod_quiz_get_quizzes_by_courses": {"courseids": (["int"], [])},
    "core_completion_get_activities_completion_status": {
        "courseid": ("int", REQUIRED),
        "userid": ("int", REQUIRED),
    },
    "mod_quiz_get_user_quiz_attempts": {
        "quizid": ("int", REQUIRED),
        "userid": ("int", 0),
        "status": ("alpha", "finished"),
        "includepreviews": ("bool", False),
    },
    "core_completion_get_course_completion_status": {
        "courseid": ("int", REQUIRED),
        "userid": ("int", REQUIRED),
    },
    "core_courseformat_update_course": {
        "action": ("alphanumext", REQUIRED),
        "courseid": ("int", REQUIRED),
        "ids": (["int"], []),
        "targetsectionid": ("int", None),
        "targetcmid": ("int", None),
    },
    "core_course_get_course_module": {"cmid": ("int", REQUIRED)},
    "core_user_get_users_by_field": {"field": ("alpha", REQUIRED), "values": (["raw"], REQUIRED)},
    "core_message_send_instant_messages": {"messages": ([_MESSAGE], REQUIRED)},
    "core_message_get_messages": {
        "useridto": ("int", REQUIRED),
        "useridfrom": ("int", 0),
        "type": ("alpha", "both"),
        "read": ("int", 1),
        "newestfirst": ("bool", True),
        "limitfrom": ("int", 0),
        "limitnum": ("int", 0),
    },
}
#: What ``clean_param`` takes out of a text of each type (``raw``: nothing).
_CLEAN = {"alpha": r"[^a-zA-Z]", "alphanumext": r"[^a-zA-Z0-9_-]", "raw": r"(?!)"}
_HEADERS = {
    "Cache-Control": "private, must-revalidate, pre-check=0, post-check=0, max-age=0",
    "Access-Control-Allow-Origin": "*",
}


def php_fields(pairs: list[tuple[str, str]]) -> Record:
    """Form fields as PHP reads them into ``$_GET`` or ``$_POST``: ``a[0][b]=1`` nests, ``a[]``
    appends, a later field wins."""
    result: Record = {}
    for name, value in pairs:
        found = re.fullmatch(r"([^\[\]]+)((?:\[[^\[\]]*\])*)", name)
        keys = [found[1], *re.findall(r"\[([^\[\]]*)\]", found[2])] if found else [name]
        node = result
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        last = keys[-1] or str(1 + max((int(k) for k in node if k.isdigit()), default=-1))
        node[last] = value
    return result


def validate(kind: Any, value: Any) -> Any:
    """``external_api::validate_parameters``: the value checked and cleaned, defaults filled."""
    if isinstance(kind, dict):
        if not isinstance(value, dict):
            raise invalid(f"Only arrays accepted. The bad value is: '{value}'")
        rest, result = dict(value), {}
        for key, (inner, default) in kind.items():
            if key in rest:
                try:
                    result[key] = validate(inner, rest.pop(key))
                except MoodleException as error:
                    raise invalid(f"{key} => {error.message}: {error.debuginfo}") from None
            elif default == REQUIRED:
                raise invalid(f"Missing required key in single structure: {key}")
            elif default != OPTIONAL:
                result[key] = default
        if rest:
            raise invalid(f"Unexpected keys ({', '.join(rest)}) detected in parameter array.")
        return result
    if isinstance(kind, list):
        if not isinstance(value, dict):
            raise invalid(f"Only arrays accepted. The bad value is: '{value}'")
        return [validate(kind[0], item) for item in value.values()]
    if isinstance(value, dict):
        raise invalid("Scalar type expected, array or object received.")
    if kind == "bool" and value in ("0", "1"):  # PARAM_BOOL takes no "true"
        return value == "1"
    if kind == "int" and re.fullmatch(r"-?[0-9]+", value) and str(int(value)) == value:
        return int(value)
    if kind in _CLEAN and re.sub(_CLEAN[kind], "", value) == value:
        return value
    raise invalid(
        f'Invalid external api parameter: the value is "{value}", '
        f'the server was expecting "{kind}" type'
    )


def xmlize(value: Any) -> str:
    """The REST server's XML of a value (``xmlize_result``)."""
    if isinstance(value, dict):
        keys = "".join(f'<KEY name="{k}">{xmlize(v)}</KEY>\n' for k, v in value.items())
        return f"<SINGLE>\n{keys}</SINGLE>\n"
    if isinstance(value, list):
        return "<MULTIPLE>\n" + "".join(xmlize(v) for v in value) + "</MULTIPLE>\n"
    if value is None:
        return '<VALUE null="null"/>\n'
    return f"<VALUE>{html.escape(str(int(value) if isinstance(value, bool) else value))}</VALUE>\n"


def answer(data: Any, json_format: bool) -> Response:
    """A result, or an error's object, as the REST server sends it: HTTP 200, PHP's JSON."""
    if json_format:
        text = json.dumps(data, ensure_ascii=True, separators=(",", ":")).replace("/", "\\/")
        return Response(text, 200, _HEADERS, "application/json")
    if isinstance(data, dict) and "exception" in data:
        inner = "".join(
            f"<{tag.upper()}>{html.escape(data[tag])}</{tag.upper()}>\n"
            for tag in ("errorcode", "message", "debuginfo")
            if tag in data
        )
        body = f'<EXCEPTION class="{data["exception"]}">\n{inner}</EXCEPTION>\n'
    else:
        body = f"<RESPONSE>\n{xmlize(data)}</RESPONSE>\n"
    xml = '<?xml version="1.0" encoding="UTF-8" ?>\n' + body
    return Response(xml, 200, _HEADERS, "application/xml; charset=utf-8")


def run(call: Call, token: Any, function: Any, params: Record) -> Any:
    """One call in the REST server's order: the token, the maintenance mode, the function, its
    parameters; then the function."""
    world = call.world
    expected = call.state.config.moodle_tokens[world["name"]].get_secret_value()
    if not isinstance(token, str) or not hmac.compare_digest(token.encode(), expected.encode()):
        raise MoodleException("invalidtoken", "Invalid token - token not found")
    if world["maintenance"]:
        raise MoodleException("sitemaintenance", SITE_MAINTENANCE)
    if not isinstance(function, str) or not function:
        raise invalid("Missing function name")
    if function not in SERVED_FUNCTIONS and function not in UNSERVED:
        raise missing("external_functions")
    if function not in world["service"]:
        debuginfo = ACCESS_DEBUGINFO.format(function)
        text = "Access control exception"
        raise MoodleException("accessexception", text, "webservice_access_exception", debuginfo)
    return SERVED_FUNCTIONS[function](call, validate(PARAMETERS[function], params))


def moodle_app(state: SandboxState) -> Starlette:
    """Each configured site's ``webservice/rest/server.php``; any other path is a 404."""

    async def server(request: Request) -> Response:
        world = site_world(state, request.path_params["site"])
        if world is None:
            return Response("Not Found", 404)
        sources = [parse_qsl(request.url.query, keep_blank_values=True)]
        if request.headers.get("content-type", "").startswith("application/x-www-form-urlenc"):
            body = (await request.body()).decode("utf-8", "replace")
            sources.append(parse_qsl(body, keep_blank_values=True))
        fields: Record = {}
        for pairs in sources:  # array_merge($_GET, $_POST): a key of the body replaces the query's
            fields.update(php_fields(pairs))
        json_format = fields.pop("moodlewsrestformat", None) == "json"
        token, function = fields.pop("wstoken", None), fields.pop("wsfunction", None)
        for name in [k for k in fields if k.startswith("moodlewssetting")]:
            del fields[name]
        site_url = str(request.url).split("/webservice/", 1)[0]
        try:
            return answer(run(Call(state, world, site_url), token, function, fields), json_format)
        except MoodleException as error:
            shown: Record = {"exception": error.kind, "errorcode": error.code}
            shown["message"] = error.message
            if world["debug"] and error.debuginfo:
                shown["debuginfo"] = error.debuginfo
            return answer(shown, json_format)

    route = Route("/{site}/webservice/rest/server.php", server, methods=["GET", "POST"])
    return Starlette(routes=[route])


class WebServerErrors:
    """The web server in front of each site: an HTTP error (an injected fault, a path no site
    serves) is its HTML page (403: empty, as the REST server refusing while disabled), not the
    JSON the gate writes for other vendors."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replaced = False

        async def pages(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] >= 400:
                replaced = True
                status = message["status"]
                page = HTMLResponse(
                    "" if status == 403 else f"<html><body><h1>{status}</h1></body></html>",
                    status,
                )
                kept = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() == b"retry-after"
                ]
                page.raw_headers.extend(kept)
                await page(scope, receive, send)
            elif not replaced:
                await send(message)

        await self.app(scope, receive, pages)


def moodle_gate(state: SandboxState) -> ASGIApp:
    """The Moodle sites behind the ``VendorGate`` (stats and faults of vendor ``moodle``) and
    their web server's error pages."""
    return WebServerErrors(VendorGate(moodle_app(state), "moodle", state))
