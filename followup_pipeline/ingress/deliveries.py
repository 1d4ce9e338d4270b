"""How the ingress stores a verified delivery: parseable (pending or unhandled) or dead at once.

Standard Webhooks bodies are JSON objects whose ``type`` names the event; EspoCRM bodies are read
by EspoCRM's own parser (``integrations/espocrm_webhooks.py``), the one ``register`` uses.
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


def parse_delivery(source: str, event_type: str | None, body: bytes) -> Parsed:
    """Check a verified body; an unparseable one is stored as a dead letter with its reason."""
    try:
        if source == "espocrm":
            espocrm_items(event_type, body)
        else:
            raw = json_body(body)
            if not isinstance(raw, dict):
                raise UnparseableBody("Standard Webhooks bodies are JSON objects")
            kind = raw.get("type")
            # Postgres text holds no NUL nor lone surrogate; the raw body (bytea) keeps the type.
            event_type = storable(kind, 200) if isinstance(kind, str) else None
    except UnparseableBody as error:
        return Parsed(event_type, "dead", storable(str(error)))
    return Parsed(event_type, "pending" if source in HANDLED_SOURCES else "unhandled")
