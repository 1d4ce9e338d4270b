"""What ``register`` needs to know of an EspoCRM webhook item: whether its deal must be read from
the CRM, the step its completion key names, what its watch copies, and what it reported."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from followup_pipeline.domain.registration import Registration, Subject
from followup_pipeline.integrations.espocrm_models import Deal, DealListing
from followup_pipeline.integrations.espocrm_webhooks import DealItem
from followup_pipeline.settings import Settings

Read = Deal | Literal["gone"] | None


class UnreadDeal(RuntimeError):
    """The event's listing of deals failed: an item that needs its deal cannot be done now."""


class DealReader(Protocol):
    """What registration needs from the CRM: the deals of some ids in one listing, and one deal
    by id (to tell a deleted deal from one the listing left out)."""

    def list_deals_by_ids(self, *, ids: Sequence[str]) -> DealListing:
        """The deals of ``ids`` that the CRM lists."""
        ...

    def get_deal(self, *, deal_id: str) -> Deal:
        """One deal; ``NotFoundError`` if it is gone."""
        ...


@dataclass(frozen=True)
class ItemResult:
    """What one item did, kept with its completion key: the deal, the outcome, the watch."""

    deal: str
    outcome: str
    watch_id: int | None = None

    def as_json(self) -> dict[str, object]:
        """The result as stored in ``step_completions.result``."""
        found: dict[str, object] = {"deal": self.deal, "outcome": self.outcome}
        if self.watch_id is not None or self.outcome in ("registered", "already_open"):
            found["watch_id"] = self.watch_id
        return found


def subject_for(item: DealItem, deal: Deal | None, settings: Settings) -> Subject:
    """What a watch copies: the CRM's record when it was read (its names are current), else the
    webhook item's own attributes."""
    if deal is not None:
        return deal.subject(settings.crm_deal_url(deal.id))
    return Subject(
        subject_id=item.deal_id,
        name=str(item.name),
        stage=str(item.stage),
        account_name=item.account_name,
        assigned_user_id=item.assigned_user_id,
        assigned_user_name=item.assigned_user_name,
        crm_url=settings.crm_deal_url(item.deal_id),
    )


def step_of(item: DealItem) -> str:
    """The step an item's completion key names."""
    return "close" if item.kind == "delete" else "open"


def needs_read(item: DealItem) -> bool:
    """Whether the item's payload lacks what the CRM must tell (its stage or names)."""
    if item.problem is not None or item.kind == "delete":
        return False
    if item.stage is None and item.kind == "update":
        return False
    return item.stage is None or item.name is None


def result_of(registration: Registration) -> ItemResult:
    """What an item reports of its registration."""
    return ItemResult(registration.subject_id, registration.outcome, registration.watch_id)
