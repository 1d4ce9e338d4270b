"""Dagster resources, one per vendor: plain ``str`` config, the client built in setup.

Secrets come in through ``dg.EnvVar("FOLLOWUP_…")`` (Dagster rejects ``SecretStr`` fields and
never shows an ``EnvVar``'s value). Each resource builds its client in ``setup_for_execution``
(or on first use outside a run), keeps it in a ``PrivateAttr`` and closes it in
``teardown_after_execution``. One way in: ``get_client()`` hands out the typed client, whose
methods are keyword-only and return pydantic models (as dagster-openai does); the resources
copy none of its methods.
"""

import json
from typing import Generic, Protocol, TypeVar

import dagster as dg
from pydantic import PrivateAttr

from followup_pipeline.integrations.accredible import AccredibleClient
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.company_lookup import CompanyLookupClient
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.integrations.espocrm_leads import EspoLeadWriter
from followup_pipeline.integrations.http import DEFAULT_TIMEOUTS, Timeouts
from followup_pipeline.integrations.mistral import MistralClient
from followup_pipeline.integrations.moodle import MoodleClient
from followup_pipeline.integrations.outlook import OutlookClient


class Closeable(Protocol):
    """A client that holds connections until closed."""

    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)


class ClientOwner(Generic[C]):
    """The life of a resource's client, shared by the resources: built by ``_build`` in
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

    def get_client(self) -> C:
        """The client of this run (built on first use outside a run)."""
        if self._client is None:
            self._client = self._build()
        return self._client


class EspoCrmResource(ClientOwner[EspoCrmClient], dg.ConfigurableResource["EspoCrmResource"]):
    """Reads deals and their activity from EspoCRM (read only); ``lead_writer`` writes Leads."""

    _client: EspoCrmClient | None = PrivateAttr(default=None)
    _writer: EspoLeadWriter | None = PrivateAttr(default=None)
    base_url: str
    api_key: str
    hmac_secret: str | None = None
    timeout_s: float = DEFAULT_TIMEOUTS.read_s
    connect_timeout_s: float = DEFAULT_TIMEOUTS.connect_s

    def _build(self) -> EspoCrmClient:
        timeouts = Timeouts(self.timeout_s, self.connect_timeout_s)
        return EspoCrmClient(self.base_url, self.api_key, self.hmac_secret, timeouts=timeouts)

    def lead_writer(self, custom_fields: tuple[str, ...] = ()) -> EspoLeadWriter:
        """The one writer to the CRM, of Leads only, for this run (closed with the resource);
        ``custom_fields`` are the attributes a search reads besides the standard ones."""
        if self._writer is None:
            self._writer = EspoLeadWriter(
                self.base_url,
                self.api_key,
                self.hmac_secret,
                timeouts=Timeouts(self.timeout_s, self.connect_timeout_s),
                custom_fields=custom_fields,
            )
        return self._writer

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        super().teardown_after_execution(context)
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class ClickUpResource(ClientOwner[ClickUpClient], dg.ConfigurableResource["ClickUpResource"]):
    """Creates, finds and closes follow-up tasks in one ClickUp list."""

    _client: ClickUpClient | None = PrivateAttr(default=None)
    base_url: str
    token: str
    list_id: str
    key_field_id: str | None = None
    closed_status: str | None = None
    timeout_s: float = DEFAULT_TIMEOUTS.read_s
    connect_timeout_s: float = DEFAULT_TIMEOUTS.connect_s

    def _build(self) -> ClickUpClient:
        return ClickUpClient(
            self.base_url,
            self.token,
            self.list_id,
            self.key_field_id,
            closed_status=self.closed_status,
            timeouts=Timeouts(self.timeout_s, self.connect_timeout_s),
        )


class OutlookResource(ClientOwner[OutlookClient], dg.ConfigurableResource["OutlookResource"]):
    """Sends mail from one mailbox through Microsoft Graph."""

    _client: OutlookClient | None = PrivateAttr(default=None)
    _senders: dict[str, OutlookClient] = PrivateAttr(default_factory=dict)
    login_url: str
    graph_url: str
    tenant_id: str
    client_id: str
    client_secret: str
    sender: str
    timeout_s: float = DEFAULT_TIMEOUTS.read_s
    connect_timeout_s: float = DEFAULT_TIMEOUTS.connect_s

    def _build(self) -> OutlookClient:
        return self._client_of(self.sender)

    def _client_of(self, sender: str) -> OutlookClient:
        return OutlookClient(
            self.login_url,
            self.graph_url,
            self.tenant_id,
            self.client_id,
            self.client_secret,
            sender,
            timeouts=Timeouts(self.timeout_s, self.connect_timeout_s),
        )

    def client_for(self, sender: str | None) -> OutlookClient:
        """A client sending from ``sender``'s mailbox (the machine's own when None), kept for
        the run and closed with the resource."""
        if sender is None or sender == self.sender:
            return self.get_client()
        if sender not in self._senders:
            self._senders[sender] = self._client_of(sender)
        return self._senders[sender]

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        super().teardown_after_execution(context)
        for client in self._senders.values():
            client.close()
        self._senders.clear()


class MoodleResource(dg.ConfigurableResource["MoodleResource"]):
    """The tenants' Moodle sites, one client per site and token (closed with the resource);
    ``tokens`` is the JSON map of token names to tokens (a secret)."""

    _clients: dict[tuple[str, str], MoodleClient] = PrivateAttr(default_factory=dict)
    tokens: str = "{}"
    timeout_s: float = DEFAULT_TIMEOUTS.read_s
    connect_timeout_s: float = DEFAULT_TIMEOUTS.connect_s

    def site(self, base_url: str, token_ref: str) -> MoodleClient:
        """The client of a tenant's site; ``KeyError`` naming ``token_ref`` when no token is
        configured under it (never the token)."""
        key = (base_url, token_ref)
        if key not in self._clients:
            tokens = json.loads(self.tokens or "{}")
            token = tokens.get(token_ref) if isinstance(tokens, dict) else None
            if not isinstance(token, str) or not token:
                raise KeyError(f"no Moodle token {token_ref!r} in FOLLOWUP_LMS_TOKENS")
            timeouts = Timeouts(self.timeout_s, self.connect_timeout_s)
            self._clients[key] = MoodleClient(base_url, token, timeouts=timeouts)
        return self._clients[key]

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


class AccredibleResource(dg.ConfigurableResource["AccredibleResource"]):
    """The tenants' accounts on the credential platform, one client per key (closed with the
    resource); ``tokens`` is the JSON map of key names to keys (``FOLLOWUP_LMS_TOKENS``)."""

    _clients: dict[str, AccredibleClient] = PrivateAttr(default_factory=dict)
    base_url: str
    tokens: str = "{}"
    timeout_s: float = DEFAULT_TIMEOUTS.read_s
    connect_timeout_s: float = DEFAULT_TIMEOUTS.connect_s

    def account(self, token_ref: str) -> AccredibleClient:
        """The client of a tenant's account; ``KeyError`` naming ``token_ref`` when no key is
        configured under it (never the key)."""
        if token_ref not in self._clients:
            tokens = json.loads(self.tokens or "{}")
            key = tokens.get(token_ref) if isinstance(tokens, dict) else None
            if not isinstance(key, str) or not key:
                raise KeyError(f"no credential platform key {token_ref!r} in FOLLOWUP_LMS_TOKENS")
            timeouts = Timeouts(self.timeout_s, self.connect_timeout_s)
            self._clients[token_ref] = AccredibleClient(self.base_url, key, timeouts=timeouts)
        return self._clients[token_ref]

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


class MistralResource(ClientOwner[MistralClient], dg.ConfigurableResource["MistralResource"]):
    """Two-line deal summaries from a Mistral chat model."""

    _client: MistralClient | None = PrivateAttr(default=None)
    base_url: str
    api_key: str
    model: str
    timeout_s: float = DEFAULT_TIMEOUTS.read_s
    connect_timeout_s: float = DEFAULT_TIMEOUTS.connect_s

    def _build(self) -> MistralClient:
        timeouts = Timeouts(self.timeout_s, self.connect_timeout_s)
        return MistralClient(self.api_key, self.model, server_url=self.base_url, timeouts=timeouts)


class CompanyLookupResource(
    ClientOwner[CompanyLookupClient], dg.ConfigurableResource["CompanyLookupResource"]
):
    """The company behind a lead's e-mail domain, from People Data Labs."""

    _client: CompanyLookupClient | None = PrivateAttr(default=None)
    base_url: str
    api_key: str
    timeout_s: float = DEFAULT_TIMEOUTS.read_s
    connect_timeout_s: float = DEFAULT_TIMEOUTS.connect_s

    def _build(self) -> CompanyLookupClient:
        timeouts = Timeouts(self.timeout_s, self.connect_timeout_s)
        return CompanyLookupClient(self.base_url, self.api_key, timeouts=timeouts)
