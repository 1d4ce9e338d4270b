"""Fixtures for registration: events in the log, a CRM double at the reader's boundary."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest

from followup_pipeline.integrations.errors import NotFoundError, SchemaError, TransientError
from followup_pipeline.integrations.espocrm_models import Deal, DealListing
from followup_pipeline.sandbox.webhooks import php_json
from followup_pipeline.settings import Settings, load_settings
from followup_pipeline.store.events import store_delivery


class FakeCrm:
    """Deals by id; ids in ``failing`` answer a transient error, missing ids a 404."""

    def __init__(self) -> None:
        self.deals: dict[str, Deal] = {}
        self.failing: set[str] = set()
        self.broken: set[str] = set()
        self.delay_s = 0.0
        self.calls: list[str] = []
        self.listings = 0
        self.invalid: set[str] = set()

    def add(self, deal_id: str, stage: str = "Proposal", name: str | None = None) -> None:
        """Add a deal to the CRM."""
        self.deals[deal_id] = Deal.model_validate(
            {
                "id": deal_id,
                "name": name or f"Deal {deal_id}",
                "stage": stage,
                "accountName": "ACME",
                "assignedUserId": "u1",
                "assignedUserName": "Ada",
                "createdAt": "2026-11-02 08:15:00",
                "modifiedAt": "2026-11-03 09:00:00",
            }
        )

    def get_deal(self, *, deal_id: str) -> Deal:
        """One deal, or the error the test asked for."""
        self.calls.append(deal_id)
        if deal_id in self.failing:
            raise TransientError("answered 503", vendor="espocrm", status=503)
        if deal_id not in self.deals:
            raise NotFoundError("answered 404", vendor="espocrm", status=404)
        return self.deals[deal_id]

    def list_deals_by_ids(self, *, ids: Sequence[str]) -> DealListing:
        """The deals of ``ids`` that exist, in one listing, or the error the test asked for."""
        self.calls.extend(ids)
        self.listings += 1
        time.sleep(self.delay_s)
        if any(deal_id in self.broken for deal_id in ids):
            raise ValueError("Expecting value: line 1 column 1 (char 0)")  # an HTML error page
        if any(deal_id in self.failing for deal_id in ids):
            raise TransientError("answered 503", vendor="espocrm", status=503)
        found = [self.deals[i] for i in ids if i in self.deals]
        return DealListing(
            records=[d for d in found if d.id not in self.invalid],
            invalid=[
                SchemaError(vendor="espocrm", record_id=d.id, field="stage", problem="x", raw={})
                for d in found
                if d.id in self.invalid
            ],
        )


@pytest.fixture
def crm() -> FakeCrm:
    """An empty CRM double."""
    return FakeCrm()


@pytest.fixture
def settings() -> Settings:
    """Default settings, retries without waiting."""
    return load_settings(event_backoff_base_s=0, espocrm_url="https://crm.example.com")


EventFactory = Callable[..., int]


@pytest.fixture
def add_event(db: psycopg.Connection[Any]) -> EventFactory:
    """``add_event(items, event=...)``: store an EspoCRM delivery; return its event id."""

    def add(items: list[dict[str, Any]], event: str = "Opportunity.fieldUpdate.stage") -> int:
        with db.transaction():
            stored = store_delivery(
                db, source="espocrm", event_type=event, body=php_json(items), headers={}
            )
        return stored.event_id

    return add
