"""The credential platform: Accredible's API (docs/vendors.md, Accredible), as certificates use it.

- ``issue``: ``POST /v1/credentials`` with ``{"credential": {...}}``: the group (the course's
  design), the recipient, ``issued_on`` (``YYYY-MM-DD``), and our ledger key twice: as the
  credential's own ``id`` (Accredible keeps it as ``license_id``) and in ``meta_data``. Accredible
  has no idempotency key: a create whose answer was lost is settled by a search, never by a
  second create.
- ``credential``: ``GET /v1/credentials/{id}``; its 404 is None.
- ``in_group``: ``POST /v2/credentials/search`` with ``{"query": {"group.id": …}}``, paged by
  ``meta.cursor``: what the platform holds now, the read-back of every export.

Ids come as strings in some answers and numbers in others (its own examples differ): a
credential's id is kept as text. Error bodies differ too (``{"errors": "…"}``,
``{"errors": {field: [messages]}}``, ``{"error": "…"}``, ``{"success": false, "data": "…"}``, or
plain text): the message is read from any of them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import date
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from followup_pipeline.integrations.errors import NotFoundError, SchemaError
from followup_pipeline.integrations.http import (
    DEFAULT_TIMEOUTS,
    MAX_PAGES,
    Sleep,
    Timeouts,
    VendorHttp,
    build_client,
)

VENDOR = "accredible"
#: The production API (``https://eu.api.accredible.com`` in the EU, ``sandbox.api…`` to try).
DEFAULT_URL = "https://api.accredible.com"
#: Credentials read per search page (Accredible's default is 50).
PAGE_SIZE = 100
#: The ``meta_data`` key that carries our ledger key.
KEY_FIELD = "followup_key"


def message_of(response: httpx.Response) -> str:
    """Accredible's message from any of its error shapes (or the text of a plain one)."""
    try:
        body = response.json()
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return response.text[:200]
    if not isinstance(body, dict):
        return response.text[:200]
    for name in ("errors", "error", "data", "message"):
        value = body.get(name)
        if not value:
            continue  # an empty "errors" beside the message (a 400's)
        if isinstance(value, dict):
            return "; ".join(
                f"{field} {' '.join(map(str, msgs)) if isinstance(msgs, list) else msgs}"
                for field, msgs in value.items()
            )[:300]
        if value:
            return str(value)[:300]
    return ""


class Credential(BaseModel):
    """A credential as this product reads it, from a v1 answer (``recipient.email``,
    ``group_id``) or a v2 search item (``recipient_email``, ``group.id``)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    email: str
    group_id: int
    license_id: str | None = None
    key: str | None = None
    approve: bool = True

    @field_validator("id", mode="before")
    @classmethod
    def _text_id(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value

    @classmethod
    def read(cls, raw: Any) -> Credential:
        """Either shape, or a ``SchemaError`` naming the field and keeping the record."""
        if not isinstance(raw, dict):
            raise SchemaError(
                vendor=VENDOR, record_id=None, field="credential", problem="not an object", raw=raw
            )
        recipient = _object(raw.get("recipient"))
        group = _object(raw.get("group"))
        meta = _object(raw.get("meta_data"))
        values = {
            "id": raw.get("id"),
            "email": raw.get("recipient_email") or recipient.get("email"),
            "group_id": raw.get("group_id") if raw.get("group_id") is not None else group.get("id"),
            "license_id": raw.get("license_id"),
            "key": meta.get(KEY_FIELD),
            "approve": raw.get("approve", True),
        }
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            first = error.errors()[0]
            raise SchemaError(
                vendor=VENDOR,
                record_id=str(raw.get("id")) if raw.get("id") is not None else None,
                field=".".join(str(p) for p in first["loc"]) or "credential",
                problem=first["msg"],
                raw=raw,
            ) from None

    def carries(self, key: str) -> bool:
        """Whether this credential was issued under our ledger ``key``."""
        return key in (self.license_id, self.key)


class AccredibleClient:
    """Accredible's API with one key (a tenant's)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        transport: httpx.BaseTransport | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        sleep: Sleep = time.sleep,
    ) -> None:
        headers = {
            "Authorization": f"Token token={api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self._client = build_client(
            base_url, headers=headers, transport=transport, timeouts=timeouts
        )
        self._http = VendorHttp(self._client, vendor=VENDOR, message_of=message_of, sleep=sleep)

    def __repr__(self) -> str:
        return f"AccredibleClient({self._client.base_url!s})"  # never the key

    def close(self) -> None:
        self._client.close()

    def issue(
        self, *, group_id: int, name: str, email: str, issued_on: date, key: str
    ) -> Credential:
        """Create the credential (not idempotent: a lost answer is settled by ``in_group``)."""
        body = {
            "credential": {
                "id": key,
                "group_id": group_id,
                "recipient": {"name": name, "email": email},
                "issued_on": issued_on.isoformat(),
                "meta_data": {KEY_FIELD: key},
            }
        }
        response = self._http.request("POST", "v1/credentials", json=body)
        answer = self._http.json(response, ambiguous=True)
        return Credential.read(answer.get("credential") if isinstance(answer, dict) else answer)

    def credential(self, credential_id: str) -> Credential | None:
        """The credential of this id (Accredible's or ours), None when it has none."""
        try:
            response = self._http.request("GET", f"v1/credentials/{_path_id(credential_id)}")
        except NotFoundError:
            return None
        answer = self._http.json(response)
        return Credential.read(answer.get("credential") if isinstance(answer, dict) else answer)

    def in_group(
        self, group_id: int, *, invalid: list[SchemaError] | None = None
    ) -> Iterator[Credential]:
        """Every credential of the group, as the platform holds it now (paged by cursor). An
        item that breaks the schema raises a ``SchemaError``; with ``invalid``, it is kept there
        (its raw record and the field) and the listing goes on."""
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page: dict[str, Any] = {"size": PAGE_SIZE}
            if cursor is not None:
                page["cursor"] = cursor
            body = {"query": {"group.id": group_id}, "sort": {"id": "asc"}, "page": page}
            response = self._http.request(
                "POST", "v2/credentials/search", json=body, idempotent=True
            )
            answer = self._http.json(response)
            items = answer.get("credentials") if isinstance(answer, dict) else None
            if not isinstance(items, list):
                raise SchemaError(
                    vendor=VENDOR,
                    record_id=None,
                    field="credentials",
                    problem="not a list",
                    raw=answer,
                )
            for item in items:
                try:
                    yield Credential.read(item)
                except SchemaError as error:
                    if invalid is None:
                        raise
                    invalid.append(error)
            meta = _object(answer.get("meta"))
            following = meta.get("cursor")
            if not items or not following or following == cursor:
                return
            cursor = str(following)
        raise SchemaError(
            vendor=VENDOR, record_id=None, field="meta.cursor", problem="never ends", raw=None
        )


def _object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _path_id(value: str) -> str:
    """A credential id as one path segment: only the characters our keys and Accredible's ids
    have (a ``/`` or ``..`` would reach another path)."""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.-")
    if not value or set(value) - allowed or value in (".", ".."):
        raise SchemaError(
            vendor=VENDOR, record_id=None, field="id", problem="not a credential id", raw=value
        )
    return value
