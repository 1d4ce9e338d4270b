"""The EspoCRM double: ``/api/v1/Opportunity`` (list, one, linked activity), the activity
listings ``Email``/``Call``/``Meeting``, ``Lead`` (``sandbox/leads.py``) and ``Metadata``."""

import base64
import binascii
import hashlib
import hmac
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from followup_pipeline.sandbox import leads
from followup_pipeline.sandbox.errors import ESPO_ERROR_STATUSES, espo_error
from followup_pipeline.sandbox.leads import activity_listing
from followup_pipeline.sandbox.search import search
from followup_pipeline.sandbox.state import SandboxState

OPPORTUNITY_ATTRIBUTES = [
    "id",
    "name",
    "stage",
    "amount",
    "amountCurrency",
    "probability",
    "closeDate",
    "accountId",
    "accountName",
    "contactId",
    "contactName",
    "assignedUserId",
    "assignedUserName",
    "description",
    "createdAt",
    "modifiedAt",
]
_COMMON = ["id", "name", "parentType", "parentId", "createdAt", "modifiedAt"]
LINK_ATTRIBUTES = {
    "emails": [
        *_COMMON,
        "subject",
        "fromAddress",
        "to",
        "dateSent",
        "status",
        "body",
        "bodyPlain",
        "isHtml",
    ],
    "calls": [*_COMMON, "status", "dateStart", "dateEnd", "duration", "direction", "description"],
    "meetings": [*_COMMON, "status", "dateStart", "dateEnd", "duration", "description"],
}
LINK_ORDER = {"emails": "dateSent", "calls": "dateStart", "meetings": "dateStart"}
#: The entity each link lists (its filters are that entity's).
LINK_ENTITY = {"emails": "Email", "calls": "Call", "meetings": "Meeting"}


def metadata(state: SandboxState) -> dict[str, Any]:
    """The slice of EspoCRM's metadata the sandbox knows."""
    stages = state.config.espocrm_stages
    return {
        "entityDefs": {
            "Opportunity": {
                "fields": {
                    "stage": {"type": "enum", "options": list(stages), "default": stages[0]},
                }
            }
        }
    }


def authorized(request: Request, state: SandboxState) -> bool:
    """Whether the request carries the API key, or a valid HMAC over ``METHOD /path``."""
    key = state.config.espocrm_api_key.get_secret_value()
    given = request.headers.get("x-api-key")
    if given is not None:
        return hmac.compare_digest(given.encode(), key.encode())
    header = request.headers.get("x-hmac-authorization")
    if header is None:
        return False
    try:
        decoded = base64.b64decode(header, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    api_key, _, signature = decoded.partition(":")
    resource = request.url.path.split("/api/v1", 1)[-1]
    secret = state.config.espocrm_hmac_secret.get_secret_value().encode()
    expected = hmac.new(secret, f"{request.method} {resource}".encode(), hashlib.sha256)
    return hmac.compare_digest(api_key.encode(), key.encode()) and hmac.compare_digest(
        signature.encode(), expected.hexdigest().encode()
    )


def espocrm_app(state: SandboxState) -> Starlette:
    """The EspoCRM REST API, to be mounted at ``/espocrm``."""

    def guard(request: Request) -> Response | None:
        return None if authorized(request, state) else espo_error(401, "")

    async def opportunities(request: Request) -> Response:
        return guard(request) or search(
            request,
            state.deals.values(),
            OPPORTUNITY_ATTRIBUTES,
            "createdAt",
            "desc",
            entity="Opportunity",
            by_id=state.deals,
        )

    async def opportunity(request: Request) -> Response:
        if (denied := guard(request)) is not None:
            return denied
        deal = state.deals.get(request.path_params["id"])
        if deal is None:
            return espo_error(404, f"Record Opportunity {request.path_params['id']} not found.")
        return JSONResponse(deal)

    async def linked(request: Request) -> Response:
        if (denied := guard(request)) is not None:
            return denied
        deal_id, link = request.path_params["id"], request.path_params["link"]
        if link not in LINK_ATTRIBUTES:
            return espo_error(404, f"Link {link!r} does not exist.")
        if deal_id not in state.deals:
            return espo_error(404, f"Record Opportunity {deal_id} not found.")
        records = state.activity(deal_id, link)
        return search(
            request,
            records,
            LINK_ATTRIBUTES[link],
            LINK_ORDER[link],
            "desc",
            entity=LINK_ENTITY[link],
            today=state.clock.now().strftime("%Y-%m-%d"),
        )

    async def metadata_value(request: Request) -> Response:
        if (denied := guard(request)) is not None:
            return denied
        value: Any = metadata(state)
        for part in (request.query_params.get("key") or "").split("."):
            if part:
                value = value.get(part) if isinstance(value, dict) else None
        return JSONResponse(value)

    async def refuse(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return espo_error(status if status in ESPO_ERROR_STATUSES else 404)

    def guarded(handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            denied = guard(request)
            if denied is not None:
                return denied
            response: Response = await handler(request, state)
            return response

        return endpoint

    listings = {
        entity: guarded(activity_listing(link, LINK_ATTRIBUTES[link], LINK_ORDER[link], entity))
        for link, entity in LINK_ENTITY.items()
    }
    return Starlette(
        routes=[
            *(
                Route(f"/api/v1/{entity}", view, methods=["GET"])
                for entity, view in listings.items()
            ),
            Route("/api/v1/Lead", guarded(leads.list_leads), methods=["GET"]),
            Route("/api/v1/Lead", guarded(leads.create_lead), methods=["POST"]),
            Route("/api/v1/Lead/{id}", guarded(leads.read_lead), methods=["GET"]),
            Route("/api/v1/Lead/{id}", guarded(leads.update_lead), methods=["PUT"]),
            Route("/api/v1/Opportunity", opportunities, methods=["GET"]),
            Route("/api/v1/Opportunity/{id}", opportunity, methods=["GET"]),
            Route("/api/v1/Opportunity/{id}/{link}", linked, methods=["GET"]),
            Route("/api/v1/Metadata", metadata_value, methods=["GET"]),
        ],
        exception_handlers={HTTPException: refuse},
    )
