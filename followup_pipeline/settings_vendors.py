"""The settings of the vendors: EspoCRM (and its webhooks), ClickUp, Microsoft Graph (Outlook),
Mistral and People Data Labs (the company lookup); ``Settings`` (``settings.py``) reads them after
the core ones."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AnyHttpUrl, BaseModel, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode

from followup_pipeline.domain.links import parse_keys

#: EspoCRM webhook events the ingress understands (docs/architecture.md §3).
EspoEvent = Literal[
    "Opportunity.create",
    "Opportunity.update",
    "Opportunity.fieldUpdate.stage",
    "Opportunity.delete",
]


class EspoWebhook(BaseModel):
    """One webhook configured in EspoCRM: its id, the event it sends, and its secret."""

    id: str = Field(min_length=1)
    event: EspoEvent
    secret: SecretStr


def parse_json(value: Any, empty: Any) -> Any:
    """A JSON setting's value; ``empty`` when it is blank."""
    if isinstance(value, str):
        text = value.strip()
        return json.loads(text) if text else empty
    return value


class VendorSettings(BaseSettings):
    """Where each vendor is, and the machine's credentials and configuration there."""

    # --- EspoCRM -------------------------------------------------------------------------------
    espocrm_url: AnyHttpUrl = AnyHttpUrl("http://127.0.0.1:8765/espocrm")
    espocrm_api_key: SecretStr | None = None
    espocrm_hmac_secret: SecretStr | None = None
    espocrm_webhooks: Annotated[list[EspoWebhook], NoDecode] = []
    espocrm_legacy_signature: bool = True
    #: Standard Webhooks sources: JSON map source name → list of ``whsec_…`` secrets (rotation).
    standard_webhooks: Annotated[dict[str, list[SecretStr]], NoDecode] = {}
    #: Sources signed as Stripe signs (``Stripe-Signature``): JSON map source name → list of
    #: endpoint secrets ``whsec_…`` (the old and the new one while a rolled secret is active).
    stripe_webhooks: Annotated[dict[str, list[SecretStr]], NoDecode] = {}

    # --- ClickUp -------------------------------------------------------------------------------
    clickup_url: AnyHttpUrl = AnyHttpUrl("http://127.0.0.1:8765/clickup/api")
    clickup_token: SecretStr | None = None
    clickup_list_id: str = "sandbox-list"
    clickup_key_field_id: str | None = None
    clickup_default_assignee: int | None = None
    clickup_user_map: Annotated[dict[str, int], NoDecode] = {}
    clickup_close_on_watch_close: bool = True
    #: The status that closes a task; unset: the list's status of type closed, read from ClickUp.
    clickup_closed_status: str | None = None
    #: A task of a step completed in ClickUp (by a person, not by Followup) counts as the
    #: salesperson's follow-up and resets the cadence like an e-mail; read from the list's tasks
    #: each evaluate run. Off: ClickUp holds nothing the machine relies on.
    clickup_completion_resets: bool = False

    # --- Microsoft Graph (Outlook) -------------------------------------------------------------
    graph_url: AnyHttpUrl = AnyHttpUrl("http://127.0.0.1:8765/graph")
    graph_login_url: AnyHttpUrl = AnyHttpUrl("http://127.0.0.1:8765/login")
    graph_tenant_id: str = "sandbox-tenant"
    graph_client_id: str = "sandbox-client"
    graph_client_secret: SecretStr | None = None
    graph_sender: str = "followup@example.com"

    # --- Mistral -------------------------------------------------------------------------------
    mistral_url: AnyHttpUrl = AnyHttpUrl("http://127.0.0.1:8765/mistral")
    mistral_api_key: SecretStr | None = None
    mistral_model: str = "mistral-small-latest"

    # --- People Data Labs (company lookup) -----------------------------------------------------
    #: The Company Enrichment API's base (``…/v5/company/enrich`` is appended); the real one is
    #: ``https://api.peopledatalabs.com``.
    company_lookup_url: AnyHttpUrl = AnyHttpUrl("http://127.0.0.1:8765/pdl")
    #: Unset: no company lookup (the lead keeps only its e-mail's domain).
    company_lookup_api_key: SecretStr | None = None

    # --- Moodle (learning reminders) --------------------------------------------------------------
    #: The tenants' Moodle web-service tokens and credential-platform keys: JSON map of a
    #: tenant's ``token_ref`` or ``credential_token_ref`` (upper-case, e.g. ``ACADEMY_BERLIN``)
    #: to its token or key.
    lms_tokens: SecretStr | None = None
    #: The most reminders one ``lms_reminders`` run sends per academy (every 15 minutes); the
    #: rest go at the next run (``paced``): after an outage the backlog goes out within
    #: Exchange's ~30 messages a minute per mailbox, and Moodle's messages at the same pace.
    lms_sends_per_run: int = Field(default=300, ge=1, le=10_000)
    #: The credential platform (Accredible) the tenants' certificates are issued to; the real one
    #: is ``https://api.accredible.com`` (``https://eu.api.accredible.com`` in the EU).
    credentials_url: AnyHttpUrl = AnyHttpUrl("http://127.0.0.1:8765/accredible")

    # --- signed links in mails (domain/links.py) ---------------------------------------------
    #: The keys that sign the links in mails (a learner's opt-out, an owner's approval):
    #: ``NAME:SECRET`` pairs separated by commas, newest first; the first signs, every one
    #: verifies (rotation: put the new key first, drop the old one once its links have expired).
    #: Unset: a key made once in ``FOLLOWUP_HOME/link-keys`` (one machine on one disk).
    link_keys: SecretStr | None = None
    #: Where a person reaches the ingress from a mail (the links' base); unset: the address the
    #: last ``followup dev`` served the ingress on, else ``http://127.0.0.1:8787``.
    links_url: AnyHttpUrl | None = None

    @field_validator("link_keys")
    @classmethod
    def _link_keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        parse_keys(value.get_secret_value())  # its message names a key, never a secret
        return value

    @field_validator("lms_tokens")
    @classmethod
    def _token_map(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        tokens = parse_json(value.get_secret_value(), {})
        if not isinstance(tokens, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in tokens.items()
        ):
            # The value is a secret: the message names the shape, never the value.
            raise ValueError('a JSON object of token names to tokens, e.g. {"ACADEMY": "…"}')
        return value

    def lms_token(self, ref: str) -> str | None:
        """The Moodle token a tenant names by ``ref``; None when it is not configured."""
        if self.lms_tokens is None:
            return None
        tokens = parse_json(self.lms_tokens.get_secret_value(), {})
        value = tokens.get(ref) if isinstance(tokens, dict) else None
        return value if isinstance(value, str) else None

    @field_validator("espocrm_webhooks", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        return parse_json(value, [])

    @field_validator("clickup_user_map", "standard_webhooks", "stripe_webhooks", mode="before")
    @classmethod
    def _json_map(cls, value: Any) -> Any:
        return parse_json(value, {})

    @field_validator("standard_webhooks", "stripe_webhooks")
    @classmethod
    def _real_secrets(
        cls, value: dict[str, list[SecretStr]], info: ValidationInfo
    ) -> dict[str, list[SecretStr]]:
        # An empty or short key makes an HMAC anyone can compute: refused, never "no check".
        for source, secrets in value.items():
            if not secrets:
                raise ValueError(f"source {source!r} has no secret")
            for secret in secrets:
                text = secret.get_secret_value()
                if not text.startswith("whsec_") or len(text) < len("whsec_") + 16:
                    raise ValueError(
                        f"a secret of source {source!r} is not a webhook signing secret "
                        "(whsec_ followed by at least 16 characters)"
                    )
        return value

    @field_validator("stripe_webhooks")
    @classmethod
    def _one_scheme_a_source(
        cls, value: dict[str, list[SecretStr]], info: ValidationInfo
    ) -> dict[str, list[SecretStr]]:
        # A source is signed one way: in both maps, which of its signatures counts would depend
        # on the order of the ingress's checks (standard_webhooks is validated before this one).
        both = sorted(set(value) & set(info.data.get("standard_webhooks") or {}))
        if both:
            raise ValueError(
                f"source(s) {', '.join(both)} also in FOLLOWUP_STANDARD_WEBHOOKS; a source is "
                "signed either as Standard Webhooks or as Stripe, not both"
            )
        return value

    def crm_deal_url(self, deal_id: str) -> str:
        """The deal's page in EspoCRM's web UI (the API's base without ``/api/v1``)."""
        base = str(self.espocrm_url).rstrip("/").removesuffix("/api/v1")
        return f"{base}/#Opportunity/view/{deal_id}"

    def sandbox_credentials_missing(self) -> list[str]:
        """Names of the vendor credential variables that are unset."""
        required = {
            "FOLLOWUP_ESPOCRM_API_KEY": self.espocrm_api_key,
            "FOLLOWUP_CLICKUP_TOKEN": self.clickup_token,
            "FOLLOWUP_GRAPH_CLIENT_SECRET": self.graph_client_secret,
            "FOLLOWUP_MISTRAL_API_KEY": self.mistral_api_key,
        }
        return [name for name, value in required.items() if value is None]
