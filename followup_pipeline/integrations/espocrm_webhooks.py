"""EspoCRM's webhook bodies, normalised into items: the one parser of a delivery's body.

EspoCRM sends a JSON array of up to 50 items (PHP ``json_encode``): ``create`` items carry every
attribute, ``update`` the changed ones plus ``id``, ``fieldUpdate.stage`` only ``id`` and
``stage``, ``delete`` at least ``id``. The ingress calls it to refuse (dead-letter) a body that is
not what EspoCRM sends; ``register`` calls it to do the items.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from followup_pipeline.domain.text import NAME_LIMIT, clean_text

ItemKind = Literal["create", "update", "stage", "delete"]
KINDS: dict[str, ItemKind] = {
    "Opportunity.create": "create",
    "Opportunity.update": "update",
    "Opportunity.fieldUpdate.stage": "stage",
    "Opportunity.delete": "delete",
}


#: What a deal id may be (EspoCRM's ids are 17 hex characters; other CRMs' ids stay short).
DEAL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The longest name or stage an item may carry, once control characters are removed.
MAX_NAME = NAME_LIMIT
#: How deeply a body may nest lists and objects (EspoCRM's: 2, an array of flat objects).
MAX_DEPTH = 64
#: How much of a malformed value is shown to the operator.
SHOWN = 80


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
    #: Why the item cannot be done (a malformed id or name): recorded, and skipped.
    problem: str | None = None


def json_body(body: bytes) -> Any:
    """The body as JSON; ``UnparseableBody`` with the reason if it is not."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, ValueError) as error:
        raise UnparseableBody(f"not JSON: {error}") from None
    except RecursionError:
        raise UnparseableBody(f"not JSON we read: nested deeper than {MAX_DEPTH}") from None
    if _depth(value) > MAX_DEPTH:
        # One limit for every reader: how deep the parser itself gets depends on the caller's
        # stack, and the ingress and a register run must not disagree about a body.
        raise UnparseableBody(f"not JSON we read: nested deeper than {MAX_DEPTH}")
    return value


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, list | dict):
            deepest = max(deepest, depth)
            children = current.values() if isinstance(current, dict) else current
            stack.extend((child, depth + 1) for child in children)
    return deepest


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
        if not isinstance(item, dict):
            raise UnparseableBody(f"item {index} is not an object")
        items.append(deal_item(index, kind, item))
    return items


def deal_item(index: int, kind: ItemKind, item: dict[str, Any]) -> DealItem:
    """One item, checked: an id of up to 64 of ``[A-Za-z0-9_-]``, names and the stage of up to
    255 characters once control characters are removed. An item that breaks this carries its
    ``problem`` (the reason): it is recorded and skipped, the event's other items still apply."""
    raw_id = item.get("id")
    problem = None
    if not isinstance(raw_id, str) or not DEAL_ID.fullmatch(raw_id):
        problem = f"id {_shown(raw_id)} is not up to 64 of A-Z a-z 0-9 _ -"
    fields = {}
    for key in ("stage", "name", "accountName", "assignedUserId", "assignedUserName"):
        value = item.get(key)
        if value is not None and not isinstance(value, str):
            problem = problem or f"{key} is not a string"
            value = None
        text = clean_text(value) if isinstance(value, str) else None
        if text is not None and len(text) > MAX_NAME:
            problem = problem or f"{key} is longer than {MAX_NAME} characters"
        # An empty name is no name; an empty stage is a stage that matches nothing.
        fields[key] = text if key == "stage" else (text or None)
    return DealItem(
        index=index,
        kind=kind,
        deal_id=raw_id if isinstance(raw_id, str) and DEAL_ID.fullmatch(raw_id) else _shown(raw_id),
        stage=fields["stage"],
        name=fields["name"],
        account_name=fields["accountName"],
        assigned_user_id=fields["assignedUserId"],
        assigned_user_name=fields["assignedUserName"],
        problem=problem,
    )


def _shown(value: object) -> str:
    """A value as an operator can read it in a dead-letter list: printable and short."""
    text = clean_text(repr(value))
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"
