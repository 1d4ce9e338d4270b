"""How the ingress stores a verified delivery: parseable (pending or unhandled) or dead at once.

Standard Webhooks bodies are JSON objects whose ``type`` names the event; Stripe's events are
JSON objects too, with the event's ``type`` and its ``id`` (``evt_…``), the same on every retry of
the event: the delivery id a redelivery is recognised by. EspoCRM bodies are read by EspoCRM's own
parser (``integrations/espocrm_webhooks.py``), the one ``register`` uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from followup_pipeline.integrations.espocrm_webhooks import (
    UnparseableBody,
    espocrm_items,
    json_body,
)
from followup_pipeline.store.db import storable
from followup_pipeline.store.events import HANDLED_SOURCES, StoredStatus


@dataclass(frozen=True)
class Parsed:
    """How a verified delivery is stored: its event type, status, and the parse error if any."""

    event_type: str | None
    status: StoredStatus
    error: str | None = None
    #: The message id read from the body (Stripe's event ``id``); None when the signature
    #: carries it (Standard Webhooks' ``webhook-id``) or the sender has none (EspoCRM).
    delivery_id: str | None = None


def parse_delivery(
    source: str, event_type: str | None, body: bytes, *, stripe: bool = False
) -> Parsed:
    """Check a verified body; an unparseable one is stored as a dead letter with its reason.
    ``stripe``: the source is signed as Stripe signs, and its body names the event's id."""
    delivery_id = None
    try:
        if source == "espocrm":
            espocrm_items(event_type, body)
        else:
            raw = json_body(body)
            if not isinstance(raw, dict):
                what = "Stripe events" if stripe else "Standard Webhooks bodies"
                raise UnparseableBody(f"{what} are JSON objects")
            if stripe:
                event_id = raw.get("id")
                if not isinstance(event_id, str) or not event_id:
                    # Without it a retry could not be recognised: kept, as a dead letter.
                    raise UnparseableBody("a Stripe event has a string id (evt_…)")
                delivery_id = event_id
            named = raw.get("type")
            # Postgres text holds no NUL nor lone surrogate; the raw body (bytea) keeps the type.
            event_type = storable(named, 200) if isinstance(named, str) else None
    except UnparseableBody as error:
        return Parsed(event_type, "dead", storable(str(error)))
    status: StoredStatus = "pending" if source in HANDLED_SOURCES else "unhandled"
    return Parsed(event_type, status, delivery_id=delivery_id)
