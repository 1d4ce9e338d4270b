"""Dagster resources, one per vendor: plain ``str`` config, the client built in setup.

Secrets come in through ``dg.EnvVar("FOLLOWUP_…")`` (Dagster rejects ``SecretStr`` fields and
never shows an ``EnvVar``'s value). Each resource builds its client in ``setup_for_execution``
(or on first use outside a run), keeps it in a ``PrivateAttr`` and closes it in
``teardown_after_execution``. Methods are keyword-only and return the clients' pydantic models.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Generic, Protocol, TypeVar

import dagster as dg
from pydantic import PrivateAttr

from followup_pipeline.integrations.clickup import CLOSED_STATUS, ClickUpClient, Task
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.integrations.espocrm_models import (
    Call,
    Deal,
    DealListing,
    Email,
    Listing,
    Meeting,
)
from followup_pipeline.integrations.mistral import MistralClient, SummaryResult
from followup_pipeline.integrations.outlook import OutlookClient, SendReceipt


class Closeable(Protocol):
    """A client that holds connections until closed."""

    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)


class ClientOwner(Generic[C]):
    """The life of a resource's client, shared by the four resources: built by ``_build`` in
    ``setup_for_execution`` (or on first use outside a run), closed in teardown."""

    # Each resource declares its own ``_client`` PrivateAttr: pydantic collects private
    # attributes from models only, not from a plain mixin like this one.
    _client: C | None

    def _build(self) -> C:
        raise NotImplementedError

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._client = self._build()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def client(self) -> C:
        """The client of this run (built on first use outside a run)."""
        if self._client is None:
            self._client = self._build()
        return self._client


class EspoCrmResource(ClientOwner[EspoCrmClient], dg.ConfigurableResource["EspoCrmResource"]):
    """Reads deals and their activity from EspoCRM (read only)."""

    _client: EspoCrmClient | None = PrivateAttr(default=None)
    base_url: str
    api_key: str
    hmac_secret: str | None = None

    def _build(self) -> EspoCrmClient:
        return EspoCrmClient(self.base_url, self.api_key, self.hmac_secret)

    def list_deals(self, *, stages: Sequence[str]) -> DealListing:
        """Every deal in one of ``stages``; records that broke schema are in ``invalid``."""
        return self.client.list_deals(stages=stages)

    def get_deal(self, *, deal_id: str) -> Deal:
        """One deal; ``NotFoundError`` if it is gone."""
        return self.client.get_deal(deal_id=deal_id)

    def list_emails(self, *, deal_id: str, since: datetime | None = None) -> Listing[Email]:
        """A deal's e-mails, sent after ``since`` if given."""
        return self.client.list_emails(deal_id=deal_id, since=since)

    def list_calls(self, *, deal_id: str) -> Listing[Call]:
        """A deal's calls."""
        return self.client.list_calls(deal_id=deal_id)

    def list_meetings(self, *, deal_id: str) -> Listing[Meeting]:
        """A deal's meetings."""
        return self.client.list_meetings(deal_id=deal_id)

    def stage_options(self) -> list[str]:
        """The stage names this installation allows."""
        return self.client.stage_options()


class ClickUpResource(ClientOwner[ClickUpClient], dg.ConfigurableResource["ClickUpResource"]):
    """Creates, finds and closes follow-up tasks in one ClickUp list."""

    _client: ClickUpClient | None = PrivateAttr(default=None)
    base_url: str
    token: str
    list_id: str
    key_field_id: str | None = None
    closed_status: str = CLOSED_STATUS

    def _build(self) -> ClickUpClient:
        return ClickUpClient(self.base_url, self.token, self.list_id, self.key_field_id)

    def create_task(
        self,
        *,
        name: str,
        markdown: str,
        due_date: datetime | None,
        assignees: Sequence[int],
        idempotency_key: str,
        tags: Sequence[str] = (),
    ) -> Task:
        """Create a task carrying ``idempotency_key``; never retried (see the action ledger)."""
        return self.client.create_task(
            name=name,
            markdown=markdown,
            due_date=due_date,
            assignees=assignees,
            idempotency_key=idempotency_key,
            tags=tags,
        )

    def find_tasks_by_key(self, *, idempotency_key: str) -> list[Task]:
        """The tasks, closed included, that carry ``idempotency_key``."""
        return self.client.find_tasks_by_key(idempotency_key=idempotency_key)

    def get_task(self, *, task_id: str) -> Task:
        """One task; ``NotFoundError`` if it is gone."""
        return self.client.get_task(task_id=task_id)

    def close_task(self, *, task_id: str, comment: str) -> Task:
        """Close a task with the configured closed status and a comment saying why."""
        return self.client.close_task(
            task_id=task_id, comment=comment, closed_status=self.closed_status
        )


class OutlookResource(ClientOwner[OutlookClient], dg.ConfigurableResource["OutlookResource"]):
    """Sends mail from one mailbox through Microsoft Graph."""

    _client: OutlookClient | None = PrivateAttr(default=None)
    login_url: str
    graph_url: str
    tenant_id: str
    client_id: str
    client_secret: str
    sender: str

    def _build(self) -> OutlookClient:
        return OutlookClient(
            self.login_url,
            self.graph_url,
            self.tenant_id,
            self.client_id,
            self.client_secret,
            self.sender,
        )

    def send_mail(
        self, *, to: list[str], subject: str, html: str, headers: dict[str, str] | None = None
    ) -> SendReceipt:
        """Send one HTML message; 202 means accepted, not delivered."""
        return self.client.send_mail(to=to, subject=subject, html=html, headers=headers)


class MistralResource(ClientOwner[MistralClient], dg.ConfigurableResource["MistralResource"]):
    """Two-line deal summaries from a Mistral chat model."""

    _client: MistralClient | None = PrivateAttr(default=None)
    base_url: str
    api_key: str
    model: str

    def _build(self) -> MistralClient:
        return MistralClient(self.api_key, self.model, server_url=self.base_url)

    def summarise(self, *, deal_name: str, emails: Sequence[Email]) -> SummaryResult:
        """Summarise a deal's e-mails; ``InvalidModelOutput`` keeps a bad answer's raw text."""
        return self.client.summarise(deal_name=deal_name, emails=emails)
