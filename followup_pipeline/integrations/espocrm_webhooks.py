"""EspoCRM's webhook bodies, normalised into items: the one parser of a delivery's body.

EspoCRM sends a JSON array of up to 50 items (PHP ``json_encode``): ``create`` items carry every
attribute, ``update`` the changed ones plus ``id``, ``fieldUpdate.stage`` only ``id`` and
``stage``, ``delete`` at least ``id``. The ingress calls it to refuse (dead-letter) a body that is
not what EspoCRM sends; ``register`` calls it to do the items.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

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


def json_body(body: bytes) -> Any:
    """The body as JSON; ``UnparseableBody`` with the reason if it is not."""
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
    raw = json_body(body)
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
