"""The Friday overview's deals by name (docs/architecture.md §2, reports): won and lost this
week with their amounts, those that entered and left follow-up, the open follow-ups' value per
salesperson, and the deals longest without contact. Pure data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal


@dataclass(frozen=True)
class DealLine:
    """A deal of the week: its name, owner, amount, and what happened (``won``, ``lost``,
    ``entered``, or why it left follow-up) and when."""

    deal_id: str
    deal_name: str
    owner: str | None
    amount: Decimal | float | None
    currency: str | None
    what: str
    at: datetime
    crm_url: str | None = None


@dataclass(frozen=True)
class OwnerValue:
    """The open follow-ups of one salesperson in one currency: how many, and their value."""

    owner: str | None
    currency: str | None
    deals: int
    amount: Decimal | float | None


@dataclass(frozen=True)
class QuietDeal:
    """An open deal and its last contact (None: none since its follow-up began on
    ``started_on``)."""

    deal_name: str
    owner: str | None
    contact_at: datetime | None
    started_on: date
    crm_url: str | None = None


@dataclass(frozen=True)
class WeekDeals:
    """The week's deals by name."""

    won: Sequence[DealLine] = field(default_factory=list)
    lost: Sequence[DealLine] = field(default_factory=list)
    entered: Sequence[DealLine] = field(default_factory=list)
    left: Sequence[DealLine] = field(default_factory=list)
    value_by_owner: Sequence[OwnerValue] = field(default_factory=list)
    quiet: Sequence[QuietDeal] = field(default_factory=list)
