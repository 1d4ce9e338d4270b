"""The Accredible double (docs/vendors.md, Accredible): ``/accredible/v1/credentials`` (create),
``/accredible/v1/credentials/{id}`` (read, by Accredible's id or the id the issuer gave it) and
``/accredible/v2/credentials/search`` (by group, recipient e-mail or license id, paged by cursor).

As the published contract has it: ``Authorization: Token token=KEY`` (else a plain-text 401);
a create answers 200 with ``{"credential": {...}}`` and a string id; the issuer's own ``id``
becomes the credential's ``license_id``; a group refuses a second credential for the same e-mail
address (its default, ``allow_duplicate_credentials`` false) with a 422, and so does an id given
twice; a search's items are flat (``recipient_email``, ``group``) with numeric ids. Each tenant's
key sees the credentials it issued only (an Accredible account per academy). The control API
lists the credentials and loses one (``DELETE /_sandbox/accredible/credentials/{id}``): what the
platform lost must be found and issued again.
"""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from followup_pipeline.sandbox.errors import accredible_error
from followup_pipeline.sandbox.state import Record, SandboxState

#: The published text of a duplicate refused by a group's settings (v2 bulk create's 422).
DUPLICATE = (
    "has already been taken. Your group settings do not allow duplicates of this credential to "
    "be sent to the same email."
)
NOT_FOUND = {"success": False, "data": "No credential with the id given in your account"}
Endpoint = Callable[[Request], Awaitable[Response]]


def _account(state: SandboxState, request: Request) -> str | None:
    """The account (academy) whose key the request carries, if any."""
    header = request.headers.get("authorization", "")
    given = header.removeprefix("Token token=").strip('"')
    for account, key in state.config.accredible_keys.items():
        if header.startswith("Token token=") and hmac.compare_digest(
            given.encode(), key.get_secret_value().encode()
        ):
            return account
    return None


def _v1(record: Record) -> Record:
    """A credential as v1 answers it (nested recipient, string id)."""
    return {
        "id": record["id"],
        "name": record["group_name"],
        "description": None,
        "approve": True,
        "grade": None,
        "complete": True,
        "issued_on": record["issued_on"],
        "course_link": None,
        "expired_on": None,
        "custom_attributes": None,
        "group_name": record["group_name"],
        "group_id": record["group_id"],
        "url": f"https://www.credential.net/{record['id']}",
        "encoded_id": record["id"],
        "private": False,
        "recipient": {
            "name": record["recipient_name"],
            "email": record["recipient_email"],
            "phone_number": None,
            "id": None,
            "meta_data": None,
        },
        "meta_data": record["meta_data"] or None,
    }


def _v2(record: Record) -> Record:
    """A credential as a v2 search item answers it (flat, numeric id)."""
    return {
        "id": int(record["id"]),
        "uuid": record["uuid"],
        "encoded_id": record["id"],
        "recipient_name": record["recipient_name"],
        "recipient_email": record["recipient_email"],
        "recipient_id": None,
        "recipient_meta_data": {},
        "license_id": record["license_id"],
        "meta_data": record["meta_data"],
        "custom_attributes": {},
        "name": record["group_name"],
        "issued_on": record["issued_on"],
        "published_on": record["issued_on"],
        "expired_on": None,
        "created_at": record["created_at"],
        "updated_at": record["created_at"],
        "approve": True,
        "private": False,
        "grade": None,
        "issuer_id": 4897,
        "recipient_opened": False,
        "recipient_engaged": False,
        "group": {"id": record["group_id"], "name": record["group_name"]},
    }


def _create(state: SandboxState, account: str, body: Any) -> Response:
    credential = body.get("credential") if isinstance(body, dict) else None
    if not isinstance(credential, dict):
        return accredible_error(422, {"errors": "Can not create credential without recipient data"})
    recipient = credential.get("recipient")
    if not isinstance(recipient, dict) or not recipient.get("email") or not recipient.get("name"):
        return accredible_error(422, {"errors": "Can not create credential without recipient data"})
    try:
        group_id = int(credential.get("group_id"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return accredible_error(422, {"errors": "Invalid Group"})
    if group_id not in state.config.accredible_groups:
        return accredible_error(422, {"errors": "Invalid Group"})
    email = str(recipient["email"]).strip().lower()
    license_id = credential.get("id")
    mine = [c for c in state.credentials.values() if c["account"] == account]
    if license_id is not None and any(c["license_id"] == str(license_id) for c in mine):
        return accredible_error(422, {"errors": {"id": ["has already been taken"]}})
    if any(c["group_id"] == group_id and c["recipient_email"] == email for c in mine):
        return accredible_error(422, {"errors": {"recipient.email": [DUPLICATE]}})
    issued_on = str(credential.get("issued_on") or datetime.now(UTC).date().isoformat())[:10]
    meta = credential.get("meta_data")
    number = 10_000_000 + len(state.credentials) + 1
    while str(number) in state.credentials:
        number += 1
    record = {
        "id": str(number),
        "uuid": state.new_id(32),
        "account": account,
        "group_id": group_id,
        "group_name": state.config.accredible_groups[group_id],
        "recipient_name": str(recipient["name"]),
        "recipient_email": email,
        "license_id": str(license_id) if license_id is not None else None,
        "meta_data": {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {},
        "issued_on": issued_on,
        "created_at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    state.credentials[str(number)] = record
    return JSONResponse({"credential": _v1(record)})


def _matches(record: Record, query: Record) -> bool:
    for name, field in (("group.id", "group_id"), ("recipient_email", "recipient_email"),
                        ("license_id", "license_id")):  # fmt: skip
        if name in query:
            wanted = query[name]
            if field == "group_id":
                try:
                    wanted = int(wanted)
                except (TypeError, ValueError):
                    return False
            elif field == "recipient_email":
                wanted = str(wanted).lower()
            if record[field] != wanted:
                return False
    return True


def _search(state: SandboxState, account: str, body: Any) -> Response:
    if not isinstance(body, dict) or not isinstance(body.get("query"), dict):
        return accredible_error(
            400,
            {"code": 400, "message": "query is required", "status": "invalid_search_query",
             "errors": {}},
        )  # fmt: skip
    given = body.get("page")
    page: Record = given if isinstance(given, dict) else {}
    size = max(1, min(int(page.get("size") or 50), 100))
    start = 0
    if page.get("cursor"):
        try:
            start = int(json.loads(base64.b64decode(str(page["cursor"])))[0])
        except (ValueError, TypeError, IndexError, KeyError):
            return accredible_error(
                400,
                {"code": 400, "message": "Invalid cursor", "status": "invalid_search_query",
                 "errors": {}},
            )  # fmt: skip
    found = sorted(
        (c for c in state.credentials.values()
         if c["account"] == account and _matches(c, body["query"])),
        key=lambda c: int(c["id"]),
    )  # fmt: skip
    chosen = found[start : start + size]
    meta: Record = {"count": len(found), "from": start, "size": size}
    if start + size < len(found):
        meta["cursor"] = base64.b64encode(json.dumps([start + size, 0.0]).encode()).decode()
    return JSONResponse({"credentials": [_v2(c) for c in chosen], "meta": meta})


def accredible_app(state: SandboxState) -> Starlette:
    """Accredible's API for the accounts of ``config.accredible_keys``."""

    def posted(answer: Callable[[SandboxState, str, Any], Response]) -> Endpoint:
        """A POST of an account: its key checked (401), its JSON body read (400), answered."""

        async def endpoint(request: Request) -> Response:
            account = _account(state, request)
            if account is None:
                return accredible_error(401)
            try:
                body = json.loads(await request.body() or b"null")
            except ValueError:
                return accredible_error(400)
            return answer(state, account, body)

        return endpoint

    async def one(request: Request) -> Response:
        account = _account(state, request)
        if account is None:
            return accredible_error(401)
        wanted = request.path_params["credential_id"]
        for record in state.credentials.values():
            if record["account"] == account and wanted in (record["id"], record["license_id"]):
                return JSONResponse({"credential": _v1(record)})
        return accredible_error(404, NOT_FOUND)

    return Starlette(
        routes=[
            Route("/v1/credentials", posted(_create), methods=["POST"]),
            Route("/v1/credentials/{credential_id:path}", one, methods=["GET"]),
            Route("/v2/credentials/search", posted(_search), methods=["POST"]),
        ]
    )


def control_routes(state: SandboxState) -> list[Route]:
    """``/accredible/credentials`` (every account's, as stored) and ``DELETE …/{id}`` (the
    platform loses one)."""

    async def listed(request: Request) -> Response:
        return JSONResponse({"credentials": list(state.credentials.values())})

    async def lose(request: Request) -> Response:
        gone = state.credentials.pop(request.path_params["credential_id"], None)
        if gone is None:
            return JSONResponse({"error": "no such credential"}, 404)
        return JSONResponse({"lost": gone})

    return [
        Route("/accredible/credentials", listed, methods=["GET"]),
        Route("/accredible/credentials/{credential_id}", lose, methods=["DELETE"]),
    ]
