"""The product's one writer to the CRM: EspoCRM's ``Lead``, searched by e-mail address, read,
created and updated (docs/vendors.md, Leads). Nothing else.

Every path this client builds is ``Lead`` or ``Lead/{id}`` (an id of a record id's characters),
so no call of it can reach a deal or any other entity; the reading client (``espocrm.py``) sends
GET only. A create goes through EspoCRM's duplicate check: a 409 carries the duplicates it found,
as a JSON array, and is answered as ``Duplicates``, never as an error.
"""

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from followup_pipeline.domain.crm_lead import AMOUNT_ATTRIBUTES, Attributes, CrmLead
from followup_pipeline.integrations.errors import NotFoundError, SchemaError
from followup_pipeline.integrations.espocrm import (
    LEAD_FIELDS,
    VENDOR,
    api_root,
    auth_headers,
    status_reason,
)
from followup_pipeline.integrations.espocrm_models import parse_espo_datetime
from followup_pipeline.integrations.http import (
    DEFAULT_TIMEOUTS,
    Sleep,
    Timeouts,
    VendorHttp,
    build_client,
)

#: The one entity this client writes.
ENTITY = "Lead"
#: Leads of one e-mail address read at most (there should be one; a CRM with more has
#: duplicates a person merges, and the oldest is used).
SEARCH_LIMIT = 20
#: EspoCRM's duplicate check answers a create with this status and the duplicates.
CONFLICT = 409


@dataclass(frozen=True)
class Duplicates:
    """EspoCRM refused a create: these Leads look like the same person (its duplicate check)."""

    found: list[CrmLead]


#: A record id as EspoCRM makes them (17 hex characters, or a UUID where so configured): never
#: ``.`` or ``..``, which a URL resolves to another path.
RECORD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _modified_at(value: object) -> datetime | None:
    """EspoCRM's ``modifiedAt``; None when absent or unreadable (a duplicate's value map may
    leave it out)."""
    try:
        moment = parse_espo_datetime(value)
    except ValueError:
        return None
    return moment if isinstance(moment, datetime) else None


def _record(raw: Any, what: str) -> CrmLead:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"]:
        raise SchemaError(vendor=VENDOR, record_id=None, field="id", problem=what, raw=raw)
    if not RECORD_ID.fullmatch(raw["id"]):
        raise SchemaError(
            vendor=VENDOR, record_id=None, field="id", problem="not a record id", raw=raw
        )
    return CrmLead(id=raw["id"], modified_at=_modified_at(raw.get("modifiedAt")), attributes=raw)


class EspoLeadWriter:
    """Search, read, create and update EspoCRM Leads; nothing else."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        hmac_secret: str | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Sleep = time.sleep,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        custom_fields: tuple[str, ...] = (),
    ) -> None:
        root = api_root(base_url)
        self._api_key = api_key
        self._hmac_secret = hmac_secret
        client = build_client(root, transport=transport, timeouts=timeouts)
        self._http = VendorHttp(client, vendor=VENDOR, message_of=status_reason, sleep=sleep)
        #: What a search reads: the Lead's standard attributes, its amount (a salesperson's
        #: wins) and those the classification lands in.
        self._select = ",".join(
            dict.fromkeys([*LEAD_FIELDS.split(","), *AMOUNT_ATTRIBUTES, *custom_fields])
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.client.close()

    def find_by_email(self, email: str) -> list[CrmLead]:
        """The Leads whose e-mail address is ``email`` (EspoCRM compares it case-insensitively),
        oldest first."""
        params = {
            "select": self._select,
            "maxSize": SEARCH_LIMIT,
            "offset": 0,
            "orderBy": "createdAt",
            "order": "asc",
            "where[0][type]": "equals",
            "where[0][attribute]": "emailAddress",
            "where[0][value]": email,
        }
        body = self._http.json(self._send("GET", ENTITY, params=params))
        if not isinstance(body, dict) or not isinstance(body.get("list"), list):
            raise SchemaError(
                vendor=VENDOR, record_id=None, field="list", problem="no list", raw=body
            )
        return [_record(item, "a listed Lead without id") for item in body["list"]]

    def read(self, lead_id: str) -> CrmLead | None:
        """One Lead; None when it is gone (deleted, or merged into another)."""
        try:
            response = self._send("GET", self._one(lead_id))
        except NotFoundError:
            return None
        return _record(self._http.json(response), "a Lead without id")

    def create(
        self, attributes: Attributes, *, skip_duplicate_check: bool = False
    ) -> CrmLead | Duplicates:
        """``POST /Lead``: the Lead created, or the ``Duplicates`` EspoCRM's check found (409).
        Not retried here: a lost answer may have created it, and only a search can tell."""
        headers = {"X-Skip-Duplicate-Check": "true"} if skip_duplicate_check else {}
        response = self._send("POST", ENTITY, json=dict(attributes), headers=headers)
        body = self._http.json(response, ambiguous=response.status_code != CONFLICT)
        if response.status_code == CONFLICT:
            if not isinstance(body, list):
                raise SchemaError(
                    vendor=VENDOR, record_id=None, field="duplicates", problem="not a list",
                    raw=body,
                )  # fmt: skip
            return Duplicates([_record(item, "a duplicate without id") for item in body])
        return _record(body, "the created Lead without id")

    def update(self, lead_id: str, attributes: Attributes) -> CrmLead:
        """``PUT /Lead/{id}`` with the attributes that change; the whole Lead back."""
        response = self._send("PUT", self._one(lead_id), json=dict(attributes))
        return _record(self._http.json(response), "the updated Lead without id")

    @staticmethod
    def _one(lead_id: str) -> str:
        # One path segment of a record id's characters: never another entity or endpoint.
        if not RECORD_ID.fullmatch(lead_id):
            raise ValueError(f"not a Lead id: {lead_id!r}")
        return f"{ENTITY}/{lead_id}"

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        if path != ENTITY and not path.startswith(f"{ENTITY}/"):
            raise ValueError(f"the lead writer reaches {ENTITY} only, not {path!r}")
        auth = auth_headers(
            api_key=self._api_key, secret=self._hmac_secret, method=method, path=path
        )
        return self._http.request(
            method,
            path,
            params=dict(params) if params else None,
            json=json,
            headers={**auth, **(headers or {})},
            answers=(CONFLICT,) if method == "POST" else (),
        )
