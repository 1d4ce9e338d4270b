"""The sandbox's own configuration: credentials it accepts, webhooks it sends, its slow clocks."""

import base64
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

#: EspoCRM's default stage enum (docs/vendors.md).
DEFAULT_STAGES = [
    "Prospecting",
    "Qualification",
    "Proposal",
    "Negotiation",
    "Closed Won",
    "Closed Lost",
]

WebhookEvent = Literal[
    "Opportunity.create",
    "Opportunity.update",
    "Opportunity.fieldUpdate.stage",
    "Opportunity.delete",
]


class WebhookSpec(BaseModel):
    """One EspoCRM webhook: its id (17 hex characters in EspoCRM), its event, its secret."""

    id: str = Field(min_length=1)
    event: WebhookEvent
    secret: SecretStr


class CustomFieldSpec(BaseModel):
    """A custom field of the ClickUp list."""

    id: str
    name: str
    type: str = "short_text"


def _default_webhooks() -> list[WebhookSpec]:
    events: list[WebhookEvent] = [
        "Opportunity.create",
        "Opportunity.update",
        "Opportunity.fieldUpdate.stage",
        "Opportunity.delete",
    ]
    return [
        WebhookSpec(
            id=f"6650a1b2c3d4e5f{n:02x}", event=event, secret=SecretStr(f"sandbox-secret-{n}")
        )
        for n, event in enumerate(events)
    ]


def _default_fields() -> list[CustomFieldSpec]:
    return [CustomFieldSpec(id="4c1f0a3e-5b7d-4e2a-9f61-0d8c2b7a9e10", name="Followup key")]


class SandboxConfig(BaseModel):
    """Everything the sandbox accepts and does; the defaults suit a local demo."""

    # EspoCRM
    espocrm_api_key: SecretStr = SecretStr("sandbox-espocrm-key")
    espocrm_hmac_secret: SecretStr = SecretStr("sandbox-espocrm-hmac-secret")
    espocrm_stages: list[str] = Field(default_factory=lambda: list(DEFAULT_STAGES))
    #: The installation's Currency List (Administration → Currency), its default currency first:
    #: a currency field in another currency is refused (EspoCRM's ``validCurrency``).
    espocrm_currencies: list[str] = Field(
        default_factory=lambda: ["EUR", "USD", "GBP", "CHF", "JPY", "KRW", "KWD", "BHD"],
        min_length=1,
    )
    webhook_url: str | None = None
    webhooks: list[WebhookSpec] = Field(default_factory=_default_webhooks)
    #: EspoCRM's ProcessWebhookQueue job runs on cron */2: every two minutes.
    webhook_queue_interval_s: float = Field(default=120.0, gt=0)
    webhook_retry_interval_s: float = Field(default=600.0, ge=0)
    webhook_max_attempts: int = Field(default=4, ge=1)
    webhook_batch_size: int = Field(default=50, ge=1, le=50)
    #: Items EspoCRM's queue job takes in one run (``webhookQueueEventPortionSize``).
    webhook_queue_portion: int = Field(default=20, ge=1)

    # The site form (Standard Webhooks, as Svix sends them) and the payment provider (Stripe):
    # their webhooks go beside the EspoCRM webhooks' target, to `…/site-form` and `…/payment`.
    #: Standard Webhooks' secret form: ``whsec_`` + base64 of the key's bytes (here 32).
    site_form_secret: SecretStr = SecretStr(
        "whsec_" + base64.b64encode(b"sandbox-site-form-secret-32bytes").decode()
    )
    #: A Stripe endpoint secret: ``whsec_`` + 32 characters, used as it is (not decoded).
    payment_secret: SecretStr = SecretStr("whsec_sandboxPaymentEndpointSecret0000")
    #: How often the two senders look for due deliveries; their retries wait on the sandbox's
    #: clock (``POST /_sandbox/clock`` brings them on).
    sender_tick_s: float = Field(default=1.0, gt=0)

    # ClickUp
    clickup_token: SecretStr = SecretStr("pk_sandbox_0000000_SANDBOXTOKEN")
    clickup_list_id: str = "sandbox-list"
    #: The operations list, where alerts go when mail fails.
    clickup_ops_list_id: str = "sandbox-ops"
    clickup_custom_fields: list[CustomFieldSpec] = Field(default_factory=_default_fields)
    clickup_rate_limit: int = Field(default=100, ge=1)
    clickup_rate_window_s: float = Field(default=60.0, gt=0)

    # Microsoft Graph
    graph_tenant_id: str = "sandbox-tenant"
    graph_client_id: str = "sandbox-client"
    graph_client_secret: SecretStr = SecretStr("sandbox-client-secret")
    #: The tenant's mailboxes (user principal names); a path naming another user is Graph's 404
    #: ``ErrorInvalidUser``. The first is the sender ``env_lines`` gives the machine
    #: (``FOLLOWUP_GRAPH_SENDER``'s default); ``POST /_sandbox/mailboxes`` adds more.
    graph_mailboxes: list[str] = Field(
        default_factory=lambda: ["followup@example.com"], min_length=1
    )
    graph_token_expires_in: int = Field(default=3599, ge=1)
    #: Graph's limits per mailbox: 10,000 requests per 10 minutes, 4 at once (each over: 429).
    graph_messages_per_window: int = Field(default=10_000, ge=1)
    graph_rate_window_s: float = Field(default=600.0, gt=0)
    graph_concurrent_per_mailbox: int = Field(default=4, ge=1)
    #: How long one send takes in the sandbox (so that concurrent sends can be shown).
    graph_send_latency_s: float = Field(default=0.0, ge=0)

    # Mistral
    mistral_api_key: SecretStr = SecretStr("sandbox-mistral-key")
    #: Answer 401 and 429 in Mistral's older shapes (``{"detail"}``, ``{"message"}``).
    mistral_legacy_errors: bool = False

    # People Data Labs (company lookup)
    pdl_api_key: SecretStr = SecretStr("sandbox-pdl-key")
    #: PDL's limit per key and minute (1,000 for paying customers, 10 on the free plan).
    pdl_rate_limit: int = Field(default=1000, ge=1)
    pdl_rate_window_s: float = Field(default=60.0, gt=0)

    # Moodle (web services): one site per tenant, under /moodle/{site}, each with its token
    moodle_tokens: dict[str, SecretStr] = Field(
        default_factory=lambda: {
            "academy-berlin": SecretStr("sandbox-moodle-berlin-token"),
            "academy-newyork": SecretStr("sandbox-moodle-newyork-token"),
        }
    )

    # Accredible (the credential platform): the API keys it accepts (one per academy) and its
    # groups (a course's certificate design) by id
    accredible_keys: dict[str, SecretStr] = Field(
        default_factory=lambda: {
            "academy-berlin": SecretStr("sandbox-accredible-berlin-key"),
            "academy-newyork": SecretStr("sandbox-accredible-newyork-key"),
        }
    )
    accredible_groups: dict[int, str] = Field(
        default_factory=lambda: {9549: "Onboarding certificate", 9550: "Safety certificate"}
    )

    # Sandbox
    seed: int = 0
    #: Where the world is kept across restarts (``persist.py``); None: in memory only.
    state_file: Path | None = None
    #: Demo activity (``activity.py``): one change every this many seconds; None: none.
    demo_activity_s: float | None = Field(default=None, gt=0)
    #: The first change this many seconds after the start.
    demo_activity_first_s: float = Field(default=10.0, ge=0)
    #: Start of the sandbox clock (UTC); it ticks from there. None: the real time.
    start: datetime | None = None
