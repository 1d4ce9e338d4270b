"""Delivery bodies: what the ingress accepts as parseable, and EspoCRM's items normalised.

EspoCRM sends a JSON array of up to 50 items (PHP ``json_encode``): ``create`` items carry every
attribute, ``update`` the changed ones plus ``id``, ``fieldUpdate.stage`` only ``id`` and
``stage``, ``delete`` at least ``id``. Standard Webhooks bodies are JSON objects whose ``type``
names the event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from followup_pipeline.store.events import HANDLED_SOURCES, StoredStatus

ItemKind = Literal["create", "update", "stage", "delete"]
KINDS: dict[str, ItemKind] = {
    "Opportunity.create": "create",
    "Opportunity.update": "update",
    "Opportunity.fieldUpdate.stage": "stage",
    "Opportunity.delete": "delete",
}


class UnparseableBody(ValueError):
    """A signed body we cannot read; the message is the reason kept with the dead letter."""


@dataclass(frozen=True)
class Parsed:
    """How a verified delivery is stored: its event type, status, and the parse error if any."""

    event_type: str | None
    status: StoredStatus
    error: str | None = None


@dataclass(frozen=True)
class DealItem:
    """One EspoCRM item, normalised: the deal, what happened, and the attributes it carried."""

    index: int
    kind: ItemKind
    deal_id: str
    stage: str | None
    name: str | None
    account_name: str | None
    assigned_user_id: str | None
    assigned_user_name: str | None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError) as error:
        raise UnparseableBody(f"not JSON: {error}") from None


def _text(item: dict[str, Any], key: str) -> str | None:
    value = item.get(key)
    return value if isinstance(value, str) and value else None


def espocrm_items(event_type: str | None, body: bytes) -> list[DealItem]:
    """The items of an EspoCRM delivery; ``UnparseableBody`` if it is not what EspoCRM sends."""
    kind = KINDS.get(event_type or "")
    if kind is None:
        raise UnparseableBody(f"unknown EspoCRM event {event_type!r}")
    raw = _json(body)
    if not isinstance(raw, list):
        raise UnparseableBody("EspoCRM bodies are JSON arrays")
    items = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not _text(item, "id"):
            raise UnparseableBody(f"item {index} is not an object with an id")
        stage = item.get("stage")
        if stage is not None and not isinstance(stage, str):
            raise UnparseableBody(f"item {index}: stage is not a string")
        items.append(
            DealItem(
                index=index,
                kind=kind,
                deal_id=str(item["id"]),
                stage=stage,
                name=_text(item, "name"),
                account_name=_text(item, "accountName"),
                assigned_user_id=_text(item, "assignedUserId"),
                assigned_user_name=_text(item, "assignedUserName"),
            )
        )
    return items


def parse_delivery(source: str, event_type: str | None, body: bytes) -> Parsed:
    """Check a verified body; an unparseable one is stored as a dead letter with its reason."""
    try:
        if source == "espocrm":
            espocrm_items(event_type, body)
        else:
            raw = _json(body)
            if not isinstance(raw, dict):
                raise UnparseableBody("Standard Webhooks bodies are JSON objects")
            kind = raw.get("type")
            # Postgres text holds no NUL; the raw body (bytea) keeps the type exactly.
            event_type = kind.replace("\x00", "")[:200] if isinstance(kind, str) else None
    except UnparseableBody as error:
        return Parsed(event_type, "dead", str(error))
    return Parsed(event_type, "pending" if source in HANDLED_SOURCES else "unhandled")
