"""The Microsoft Graph double: the client-credentials token and ``users/{id}/sendMail`` (a JSON
message, or a MIME one: ``graph_mime.py``)."""

import asyncio
import base64
import hmac
import json
import re
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from followup_pipeline.sandbox.errors import graph_error, login_error
from followup_pipeline.sandbox.graph_body import BodyError, as_boolean, canonical, mailbox_of
from followup_pipeline.sandbox.graph_mime import (
    MimeError,
    header_properties,
    mime_message,
    read_mime,
    same_property,
)
from followup_pipeline.sandbox.state import SandboxState

GRAPH_SCOPE = "https://graph.microsoft.com/.default"


def _jwt_like(state: SandboxState) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    claims = {"aud": "https://graph.microsoft.com", "tid": state.config.graph_tenant_id}
    return f"{part({'typ': 'JWT', 'alg': 'RS256'})}.{part(claims)}.{state.new_id(43)}"


def login_app(state: SandboxState) -> Starlette:
    """The identity platform's token endpoint, to be mounted at ``/login``."""
    config = state.config

    async def token(request: Request) -> Response:
        form = dict(parse_qsl((await request.body()).decode("utf-8", "replace")))
        if request.path_params["tenant"] != config.graph_tenant_id:
            return login_error(
                400,
                "invalid_request",
                f"AADSTS90002: Tenant '{request.path_params['tenant']}' not found.",
            )
        if form.get("grant_type") != "client_credentials":
            return login_error(
                400,
                "unsupported_grant_type",
                "AADSTS70003: The app requested an unsupported grant type.",
            )
        if form.get("client_id") != config.graph_client_id:
            return login_error(
                400,
                "unauthorized_client",
                "AADSTS700016: Application was not found in the directory.",
            )
        secret = config.graph_client_secret.get_secret_value().encode()
        if not hmac.compare_digest(form.get("client_secret", "").encode(), secret):
            return login_error(
                401,
                "invalid_client",
                "AADSTS7000215: Invalid client secret provided. Ensure the secret being sent "
                "in the request is the client secret value, not the client secret ID.",
            )
        if form.get("scope") != GRAPH_SCOPE:
            return login_error(
                400, "invalid_scope", "AADSTS70011: The provided value for scope is not valid."
            )
        access_token = _jwt_like(state)
        state.tokens[access_token] = time.monotonic() + config.graph_token_expires_in
        return JSONResponse(
            {
                "token_type": "Bearer",
                "expires_in": config.graph_token_expires_in,
                "ext_expires_in": config.graph_token_expires_in,
                "access_token": access_token,
            }
        )

    return Starlette(routes=[Route("/{tenant}/oauth2/v2.0/token", token, methods=["POST"])])


def _invalid_message(body: Any) -> str | None:
    """Why Graph would refuse a sendMail body, or None."""
    message = body.get("message") if isinstance(body, dict) else None
    if not isinstance(message, dict):
        return "Empty Payload. JSON content expected."
    if not isinstance(message.get("subject", ""), str):
        return "Invalid value for property 'subject'."
    content = message.get("body", {})
    if not isinstance(content, dict) or content.get("contentType", "Text") not in (
        "HTML",
        "Text",
        "html",
        "text",
    ):
        return "Requested value is not a valid contentType: expected HTML or Text."
    recipients = message.get("toRecipients")
    if not isinstance(recipients, list) or not recipients:
        return "At least one recipient is required, but none were found."
    for recipient in recipients:
        address = (
            recipient.get("emailAddress", {}).get("address")
            if isinstance(recipient, dict)
            else None
        )
        if not isinstance(address, str) or "@" not in address:
            return "At least one recipient is not valid."
    return None


#: ``singleValueExtendedProperties/Any(ep: ep/id eq '…' and ep/value eq '…')``.
SENT_FILTER = re.compile(
    r"singleValueExtendedProperties/Any\(ep: ep/id eq '(?P<prop>(?:[^']|'')*)' "
    r"and ep/value eq '(?P<value>(?:[^']|'')*)'\)"
)


def graph_app(state: SandboxState) -> Starlette:
    """Graph v1.0 ``sendMail`` and the Sent Items lookup, to be mounted at ``/graph``."""
    config = state.config

    in_flight: dict[str, int] = {}

    def refused(request: Request) -> Response | None:
        """The 401 for a request without a valid token, else the 404 ``ErrorInvalidUser`` for a
        user the tenant does not have, else None."""
        header = request.headers.get("authorization", "")
        if not header.startswith("Bearer ") or not header[7:]:
            return graph_error(401, message="Access token is empty.")
        expires = state.tokens.get(header[7:])
        if expires is None:
            return graph_error(401, message="Access token validation failure. Invalid audience.")
        if expires <= time.monotonic():
            return graph_error(401, message="Lifetime validation failed, the token is expired.")
        user = request.path_params["user"]
        if mailbox_of(user, state.mailboxes) is None:
            return graph_error(404, "ErrorInvalidUser", f"The requested user '{user}' is invalid.")
        return None

    def mailbox(request: Request) -> str:
        """The address of the path's user (``refused`` has checked that there is one)."""
        return mailbox_of(request.path_params["user"], state.mailboxes) or ""

    async def sent_items(request: Request) -> Response:
        """``GET …/mailFolders/SentItems/messages`` with the one ``$filter`` Graph documents for
        a single-value extended property (the sandbox knows no other filter)."""
        problem = refused(request)
        if problem is not None:
            return problem
        wanted = SENT_FILTER.fullmatch(request.query_params.get("$filter", "").strip())
        if wanted is None:
            return graph_error(400, "BadRequest", "Invalid filter clause.")
        prop, value = wanted["prop"].replace("''", "'"), wanted["value"].replace("''", "'")
        address = mailbox(request).lower()

        def carries(message: dict[str, Any]) -> bool:
            return any(
                same_property(prop, str(p.get("id"))) and p.get("value") == value
                for p in message.get("singleValueExtendedProperties") or []
            )

        found = [
            {
                "id": entry["id"],
                "subject": entry["message"].get("subject"),
                "sentDateTime": entry["received_at"],
                "isDraft": False,
            }
            for entry in state.outbox
            if entry["mailbox"].lower() == address
            and entry["save_to_sent_items"]
            and carries(entry["message"])
        ]
        if "SentItems" not in request.url.path:  # the whole mailbox: drafts too
            found += [
                {"id": draft_id, "subject": draft["message"].get("subject"), "isDraft": True}
                for draft_id, draft in state.drafts.items()
                if draft["mailbox"].lower() == address and carries(draft["message"])
            ]
        top_text = request.query_params.get("$top", "10")
        if not top_text.isdigit():
            return graph_error(400, "BadRequest", "Invalid $top value.")
        top = int(top_text)
        return JSONResponse({"value": found[:top]})

    async def create_draft(request: Request) -> Response:
        """``POST …/users/{id}/messages`` with a base64 MIME body (``Content-Type:
        text/plain``): a draft, its text and HTML parts kept."""
        problem = refused(request)
        if problem is not None:
            return problem
        if not request.headers.get("content-type", "").startswith("text/plain"):
            return graph_error(400, "BadRequest", "Only MIME drafts are known to the sandbox.")
        try:
            message = mime_message(read_mime(await request.body()))
        except MimeError as error:
            return graph_error(400, error.code, str(error))
        draft_id = state.new_id(32)
        state.drafts[draft_id] = {"mailbox": mailbox(request), "message": message}
        return JSONResponse({"id": draft_id, "isDraft": True, **message}, 201)

    async def update_draft(request: Request) -> Response:
        """``PATCH …/messages/{id}``: the given properties replace the draft's."""
        problem = refused(request)
        if problem is not None:
            return problem
        draft = state.drafts.get(request.path_params["message_id"])
        if draft is None or draft["mailbox"].lower() != mailbox(request).lower():
            return graph_error(404, "ErrorItemNotFound", "The specified object was not found.")
        try:
            body = canonical(json.loads(await request.body() or b"{}"), "message")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return graph_error(400, "BadRequest", "Unable to read JSON request payload.")
        except BodyError as error:
            return graph_error(400, "RequestBodyRead", str(error))
        draft["message"].update(body)
        return JSONResponse({"id": request.path_params["message_id"], "isDraft": True})

    async def send_draft(request: Request) -> Response:
        """``POST …/messages/{id}/send``: the draft goes out (202), into Sent Items."""
        problem = refused(request)
        if problem is not None:
            return problem
        draft = state.drafts.get(request.path_params["message_id"])
        if draft is None or draft["mailbox"].lower() != mailbox(request).lower():
            return graph_error(404, "ErrorItemNotFound", "The specified object was not found.")
        del state.drafts[request.path_params["message_id"]]
        await asyncio.sleep(config.graph_send_latency_s)
        state.outbox.append(
            {
                "id": request.path_params["message_id"],
                "mailbox": draft["mailbox"],
                "received_at": state.clock.espo(),
                "message": draft["message"],
                "save_to_sent_items": True,
            }
        )
        return Response(status_code=202, headers={"request-id": str(uuid.uuid4())})

    async def send_mail(request: Request) -> Response:
        """``POST …/sendMail``: a JSON message, or (``Content-Type: text/plain``) a base64 MIME
        one, whose headers Exchange keeps as PS_INTERNET_HEADERS properties; saved to Sent
        Items."""
        no_token = refused(request)
        if no_token is not None:
            return no_token
        try:
            if request.headers.get("content-type", "").startswith("text/plain"):
                mime = read_mime(await request.body())
                body = {"message": {**mime_message(mime), **header_properties(mime)}}
                save = True
            else:
                body = canonical(json.loads(await request.body()), "sendMail")
                save = as_boolean(body.get("saveToSentItems", True))
        except MimeError as error:
            return graph_error(400, error.code, str(error))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return graph_error(400, "BadRequest", "Unable to read JSON request payload.")
        except BodyError as error:
            return graph_error(400, "RequestBodyRead", str(error))
        problem = _invalid_message(body)
        if problem is not None:
            code = "ErrorInvalidRecipients" if "recipient" in problem else "BadRequest"
            return graph_error(400, code, problem)
        address = mailbox(request)
        key = address.lower()
        if in_flight.get(key, 0) >= config.graph_concurrent_per_mailbox:
            return graph_error(
                429, message="Application is over its MailboxConcurrency limit.", retry_after=1
            )
        allowed, _, reset = state.take_rate(
            f"graph:{key}", config.graph_messages_per_window, config.graph_rate_window_s
        )
        if not allowed:
            wait = max(1, int(reset - time.time()))
            return graph_error(
                429,
                message="Application is over its request limit for this mailbox.",
                retry_after=wait,
            )
        in_flight[key] = in_flight.get(key, 0) + 1
        try:  # the send takes its time; sends to the same mailbox meanwhile count against it
            await asyncio.sleep(config.graph_send_latency_s)
        finally:
            in_flight[key] -= 1
        state.outbox.append(
            {
                "id": state.new_id(32),
                "mailbox": address,
                "received_at": state.clock.espo(),
                "message": body["message"],
                "save_to_sent_items": save,
            }
        )
        # Accepted, not delivered; Graph names the request for support, the client echoed.
        headers = {
            "request-id": str(uuid.uuid4()),
            "client-request-id": request.headers.get("client-request-id", str(uuid.uuid4())),
        }
        return Response(status_code=202, headers=headers)

    async def refuse(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return graph_error(status, message="Resource not found for the segment.")

    return Starlette(
        routes=[
            Route("/v1.0/users/{user}/sendMail", send_mail, methods=["POST"]),
            Route("/v1.0/users/{user}/mailFolders/SentItems/messages", sent_items, methods=["GET"]),
            Route("/v1.0/users/{user}/messages", sent_items, methods=["GET"]),
            Route("/v1.0/users/{user}/messages", create_draft, methods=["POST"]),
            Route("/v1.0/users/{user}/messages/{message_id}", update_draft, methods=["PATCH"]),
            Route("/v1.0/users/{user}/messages/{message_id}/send", send_draft, methods=["POST"]),
        ],
        exception_handlers={HTTPException: refuse},
    )
