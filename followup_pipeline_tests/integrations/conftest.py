"""Shared fixtures for the vendor client tests: recorded sleeps, records, the sandbox server."""

from collections.abc import Callable
from typing import Any

import httpx
import pytest

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def sleeps() -> list[float]:
    """Waits the clients asked for, recorded instead of slept."""
    return []


@pytest.fixture
def make_deal() -> Callable[..., dict[str, Any]]:
    """A factory of raw EspoCRM Opportunity records, with ``**overrides``."""

    def make(number: int = 1, **overrides: Any) -> dict[str, Any]:
        record: dict[str, Any] = {
            "id": f"deal{number:05d}",
            "name": f"Deal {number}",
            "stage": "Proposal",
            "amount": 1000.0 + number,
            "amountCurrency": "EUR",
            "closeDate": "2026-12-31",
            "accountId": "acc1",
            "accountName": "ACME",
            "assignedUserId": "user1",
            "assignedUserName": "Ada",
            "createdAt": "2026-11-02 08:15:00",
            "modifiedAt": "2026-11-03 09:00:00",
        }
        record.update(overrides)
        return record

    return make
