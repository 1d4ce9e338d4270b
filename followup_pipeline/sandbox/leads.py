"""EspoCRM's ``Lead`` (list, read, create with its duplicate check, update) and the activity
listings across deals (``/Email``, ``/Call``, ``/Meeting``), for the EspoCRM double.

The duplicate check is EspoCRM's: a create whose e-mail address, or first and last name, matches a
lead answers 409 with the duplicates as a JSON array, unless the request says
``X-Skip-Duplicate-Check: true``.

A Lead's name is EspoCRM's: it needs a first or last name only when it has no account name, e-mail
address or phone number (``logicDefs/Lead.json``, checked by the server too), and its ``name`` is
``NULLIF(TRIM(firstName + ' ' + lastName), '')`` (``PersonName``): null when both are empty. The
listing is the search of every list (``search.py``), so ``where`` (``after`` a ``modifiedAt``),
``select``, ``orderBy``, ``offset``/``maxSize`` and ``X-No-Total`` answer as EspoCRM's do.

Its currency field is EspoCRM's: ``opportunityAmount`` (a float) and
``opportunityAmountCurrency``, which must be one of the installation's Currency List
(``FieldValidators/CurrencyType::checkValidCurrency``, a mandatory validation: 400 "Field
validation failure" naming the field and ``validCurrency``); a create with an amount and no
currency gets the default currency (``Record/Service::populateDefaults``).
"""

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from followup_pipeline.sandbox.errors import espo_error
from followup_pipeline.sandbox.search import search
from followup_pipeline.sandbox.state import SandboxState

LEAD_ATTRIBUTES = [
    "id",
    "name",
    "firstName",
    "lastName",
    "emailAddress",
    "phoneNumber",
    "accountName",
    "status",
    "source",
    "description",
    "assignedUserId",
    "opportunityAmount",
    "opportunityAmountCurrency",
    "createdAt",
    "modifiedAt",
    # The installation's custom fields (Entity Manager; EspoCRM prefixes them with ``c``): where
    # the product's default ``FOLLOWUP_LEAD_CRM_FIELDS`` puts a lead's classification.
    "cFollowupPriority",
    "cFollowupSegment",
    "cFollowupIntent",
]
LEAD_STATUSES = ["New", "Assigned", "In Process", "Converted", "Recycled", "Dead"]
#: Attributes a client may write (the rest are EspoCRM's own).
WRITABLE = set(LEAD_ATTRIBUTES) - {"id", "name", "createdAt", "modifiedAt"}


async def _body(request: Request) -> dict[str, Any] | Response:
    try:
        body = json.loads(await request.body() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return espo_error(400, "Bad JSON.")
    if not isinstance(body, dict):
        return espo_error(400, "Bad JSON.")
    # EspoCRM ignores attributes it does not know or that are its own to set.
    body = {key: value for key, value in body.items() if key in WRITABLE}
    status = body.get("status")
    if status is not None and status not in LEAD_STATUSES:
        return espo_error(400, f"Bad value for status: {status!r}.")
    return body


def _invalid_amount(state: SandboxState, lead: dict[str, Any]) -> Response | None:
    """EspoCRM's 400 for a currency field that breaks its checks, else None."""
    amount, currency = lead.get("opportunityAmount"), lead.get("opportunityAmountCurrency")
    failed = None
    if amount is not None and (isinstance(amount, bool) or not isinstance(amount, int | float)):
        failed = "valid"
    elif (amount is not None or currency is not None) and (
        currency not in state.config.espocrm_currencies
    ):
        failed = "validCurrency"
    if failed is None:
        return None
    data = {"field": "opportunityAmount", "type": failed}
    body = {"messageTranslation": {"label": "validationFailure", "scope": None, "data": data}}
    reason = (
        f"Field validation failure; entityType: Lead, field: opportunityAmount, type: {failed}."
    )
    return JSONResponse(body, 400, headers={"X-Status-Reason": reason})


#: A Lead's name is required only when none of these is given (``logicDefs/Lead.json``).
REACHABLE_BY = ("accountName", "emailAddress", "phoneNumber")


def _name(lead: dict[str, Any]) -> str | None:
    """EspoCRM's ``name`` of a person: first and last name, or null when both are empty."""
    return " ".join(p for p in (lead.get("firstName"), lead.get("lastName")) if p) or None


def _duplicates(state: SandboxState, lead: dict[str, Any]) -> list[dict[str, Any]]:
    """EspoCRM's rule for a person: the same first and last name, or the same e-mail address."""
    email = (lead.get("emailAddress") or "").lower()
    first, last = (lead.get("firstName") or "").lower(), (lead.get("lastName") or "").lower()
    return [
        other
        for other in state.leads.values()
        if (email and (other.get("emailAddress") or "").lower() == email)
        or (
            last
            and (other.get("firstName") or "").lower() == first
            and (other.get("lastName") or "").lower() == last
        )
    ]


async def list_leads(request: Request, state: SandboxState) -> Response:
    """``GET /Lead``: the search of every list."""
    return search(
        request, state.leads.values(), LEAD_ATTRIBUTES, "createdAt", "desc", entity="Lead"
    )


async def read_lead(request: Request, state: SandboxState) -> Response:
    """``GET /Lead/{id}``."""
    lead = state.leads.get(request.path_params["id"])
    if lead is None:
        return espo_error(404, f"Record Lead {request.path_params['id']} not found.")
    return JSONResponse(lead)


async def create_lead(request: Request, state: SandboxState) -> Response:
    """``POST /Lead``: 409 with the duplicates unless ``X-Skip-Duplicate-Check: true``."""
    body = await _body(request)
    if isinstance(body, Response):
        return body
    if not _name(body) and not any(body.get(key) for key in REACHABLE_BY):
        return espo_error(400, "Field name is required.")
    if body.get("opportunityAmount") is not None and not body.get("opportunityAmountCurrency"):
        body["opportunityAmountCurrency"] = state.config.espocrm_currencies[0]
    if (refused := _invalid_amount(state, body)) is not None:
        return refused
    skip = request.headers.get("x-skip-duplicate-check", "").lower() == "true"
    found = [] if skip else _duplicates(state, body)
    if found:
        return JSONResponse(found, 409, headers={"X-Status-Reason": "duplicate"})
    now, lead_id = state.clock.espo(), state.new_id()
    lead: dict[str, Any] = dict.fromkeys(LEAD_ATTRIBUTES)
    lead.update(body)
    lead.update(id=lead_id, createdAt=now, modifiedAt=now)
    lead["status"] = lead["status"] or "New"
    lead["name"] = _name(lead)
    state.leads[lead_id] = lead
    return JSONResponse(lead)


async def update_lead(request: Request, state: SandboxState) -> Response:
    """``PUT /Lead/{id}``: the changed attributes; the whole record back."""
    lead = state.leads.get(request.path_params["id"])
    if lead is None:
        return espo_error(404, f"Record Lead {request.path_params['id']} not found.")
    body = await _body(request)
    if isinstance(body, Response):
        return body
    touched = {"opportunityAmount", "opportunityAmountCurrency"} & set(body)
    if touched and (refused := _invalid_amount(state, {**lead, **body})) is not None:
        return refused  # EspoCRM validates the fields the request sets
    lead.update(body)
    lead["name"] = _name(lead)
    lead["modifiedAt"] = state.clock.espo()
    return JSONResponse(lead)


def activity_listing(link: str, attributes: list[str], order_by: str, entity: str) -> Any:
    """``GET /Email`` (``/Call``, ``/Meeting``): every deal's activity of that kind, searched
    like any list of ``entity`` (e.g. ``after`` a moment, ``parentType`` ``equals``)."""

    async def listing(request: Request, state: SandboxState) -> Response:
        records = [record for links in state.activities.values() for record in links.get(link, [])]
        today = state.clock.now().strftime("%Y-%m-%d")
        return search(request, records, attributes, order_by, "desc", entity=entity, today=today)

    return listing
