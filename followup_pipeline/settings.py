"""Everything configurable: the environment (prefix ``FOLLOWUP_``), ``.env`` or a secrets folder.

Secrets are ``SecretStr`` here; Dagster resources receive them as plain strings through
``dg.EnvVar`` (Dagster rejects ``SecretStr`` fields). A wrong value stops the start with a
``ConfigError`` naming the variable and what is allowed.
"""

from __future__ import annotations

import os
import re
from datetime import time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AnyHttpUrl, Field, ValidationError, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from followup_pipeline.domain.crm_lead import (
    CLASSIFICATION_ITEMS,
    CRM_ATTRIBUTE,
    DEFAULT_LEAD_CRM_FIELDS,
    LEAD_OWN_ATTRIBUTES,
)
from followup_pipeline.domain.leads import FORM_FIELDS
from followup_pipeline.integrations.http import Timeouts
from followup_pipeline.settings_core import ADDRESS, CoreSettings, split_list
from followup_pipeline.settings_vendors import EspoWebhook as EspoWebhook  # for the ingress
from followup_pipeline.settings_vendors import VendorSettings, parse_json

ENV_PREFIX = "FOLLOWUP_"
#: An ISO 4217 currency code, as EspoCRM's Currency List holds one.
CURRENCY = re.compile(r"[A-Z]{3}")
#: The lead intake's event sources (docs/architecture.md §9): the site form, the payment
#: provider, and the nightly sweep of the CRM's leads.
LEAD_SOURCES = ("site-form", "payment", "crm-changes")


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the variable and the allowed values."""


# The fields in order: storage, time and calendar, the deals (CoreSettings), the vendors
# (VendorSettings), then these. Pydantic takes the bases' fields from the last base to the first,
# hence CoreSettings last; the order of the fields is the order of ConfigError's lines.
class Settings(VendorSettings, CoreSettings):
    """The machine's configuration. Field ``x`` is read from ``FOLLOWUP_X``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
    )

    # --- enrichment (two-line summaries) ---------------------------------------------------------
    #: Off: the enrich job calls no model and writes nothing (``dry_run`` does not stop it).
    enrich_enabled: bool = True
    #: A deal's e-mails of this many days, at most this many (the newest), go to the model.
    enrich_lookback_days: int = Field(default=30, ge=1, le=365)
    enrich_max_emails: int = Field(default=8, ge=1, le=50)
    #: Each e-mail's text is cut to this many characters after trimming.
    enrich_email_max_chars: int = Field(default=1500, ge=200, le=20000)
    #: A summary line may be at most this long.
    enrich_line_max_chars: int = Field(default=160, ge=40, le=1000)
    #: Model calls and tokens one run may spend; the rest waits for the next run.
    enrich_budget_calls: int = Field(default=100, ge=1)
    enrich_budget_tokens: int = Field(default=200_000, ge=1)
    #: Mask e-mail addresses, phone numbers and IBANs before any text leaves for the model.
    enrich_mask_personal_data: bool = True

    # --- alerts (failures, dead letters, a machine that stopped working) -------------------------
    #: Who receives the alert mails: the operations owner and a backup (e-mail addresses).
    ops_owner: str | None = None
    ops_backup: str | None = None
    #: The ClickUp list alerts go to when mail fails (the second channel); unset: none.
    ops_clickup_list_id: str | None = None
    #: Repeats of one run failure within this many hours of its alert are held back and counted.
    alert_window_h: float = Field(default=6.0, gt=0, le=168)
    #: An event still pending after this many minutes raises an alert.
    alert_pending_after_min: float = Field(default=15.0, gt=0)
    #: Business hours without a clean ``evaluate`` (outcome ``ok``) before an alert.
    alert_evaluate_silence_h: float = Field(default=2.0, gt=0)
    #: A job whose runs end ``partial`` (a vendor away, work skipped) this many runs in a row,
    #: or for this many hours, raises one alert; a clean run after it, one "recovered".
    alert_degraded_runs: int = Field(default=3, ge=1, le=50)
    alert_degraded_h: float = Field(default=2.0, gt=0, le=168)
    #: Dead letters that each get their own alert within one alert window; the rest of the
    #: window's go out together in one digest that counts them (a CRM outage is not 300 mails).
    alert_dead_letters_per_window: int = Field(default=10, ge=1, le=1000)
    #: How often the ``alert_checks`` sensor looks for dead letters, lag and silence.
    alerts_sensor_interval_s: int = Field(default=30, ge=1, le=3600)
    #: Business days a watched stage may list no deal (having had some), or see none enter while
    #: deals enter the others, before the census of the stages alerts (docs/operations.md).
    census_quiet_days: int = Field(default=5, ge=1, le=60)
    #: ``followup watchdog`` (outside the daemon): how often it looks, how old the daemon's
    #: heartbeats (they beat every 30 s) and a sensor's last evaluation may be, and how long
    #: after its moment a schedule's tick may come before it is missed.
    watchdog_every_s: int = Field(default=60, ge=1, le=3600)
    watchdog_heartbeat_late_s: int = Field(default=120, ge=1, le=604_800)
    watchdog_tick_late_s: int = Field(default=300, ge=1, le=86_400)
    #: The Dagster UI as operators reach it (the run links in alerts); unset: the address the
    #: last ``followup dev`` served on, else http://127.0.0.1:3000.
    ui_url: AnyHttpUrl | None = None

    # --- retention (``followup purge``) -----------------------------------------------------------
    #: Days a processed webhook's raw body and headers are kept (dead letters keep theirs).
    retain_webhook_bodies_days: int = Field(default=90, ge=1)
    #: Days e-mail text sent to the model is kept (the review list's ``source_text``).
    retain_email_text_days: int = Field(default=90, ge=1)
    #: Days finished Dagster runs (and their event logs) are kept.
    retain_runs_days: int = Field(default=90, ge=1)
    #: Where the nightly backups go (``housekeeping_backup``); unset: ``FOLLOWUP_HOME/backups``.
    backup_dir: Path | None = None
    #: How many nightly backups are kept (the oldest beyond go).
    backup_keep: int = Field(default=7, ge=1, le=365)

    def backups(self) -> Path:
        """The folder of the nightly backups."""
        return self.backup_dir or self.home / "backups"

    # --- the vendor clients ----------------------------------------------------------------------
    #: Seconds a vendor client waits for an answer (and to send a body).
    vendor_timeout_s: float = Field(default=30.0, gt=0)
    #: Seconds a vendor client waits to connect (and for a pooled connection).
    vendor_connect_timeout_s: float = Field(default=5.0, gt=0)
    #: How long an action left ``attempted``/``unknown`` is not sent again nor settled (its
    #: request may still be on its way); unset: the client's whole request time plus the margin.
    action_in_flight_s: float | None = Field(default=None, ge=0)
    action_in_flight_margin_s: float = Field(default=30.0, ge=0)

    # --- local servers -------------------------------------------------------------------------
    ingress_host: str = "127.0.0.1"
    ingress_port: int = Field(default=8787, ge=1, le=65535)
    ingress_max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    #: Database connections of the whole ingress, shared by its workers (at least 2 each):
    #: Postgres allows 100 by default, and Dagster needs its own.
    ingress_db_connections: int = Field(default=16, ge=2, le=500)
    #: Connections of one ingress process (set by ``followup ingress`` for its workers).
    ingress_pool_size: int | None = Field(default=None, ge=1, le=500)
    #: Group commit: deliveries arriving within this many milliseconds of a batch's first are
    #: stored in one transaction (0: each on its own), at most ``ingress_batch_rows`` of them.
    ingress_batch_window_ms: float = Field(default=2.0, ge=0, le=100)
    ingress_batch_rows: int = Field(default=64, ge=1, le=1000)
    sandbox_port: int = Field(default=8765, ge=1, le=65535)
    #: Where the code server of a production machine answers (``followup serve code-server``);
    #: set, the webserver, the daemon and ``followup dagster`` load the code from it instead of
    #: starting one of their own.
    code_server_host: str | None = None
    code_server_port: int = Field(default=4266, ge=1, le=65535)

    # --- the event log ---------------------------------------------------------------------------
    #: Attempts at an event before it becomes a dead letter.
    event_max_attempts: int = Field(default=5, ge=1)
    #: Runs an event may stop in a row with an error of the database itself (not charged as
    #: attempts, engine/run_stops.py) before it becomes a dead letter.
    event_run_stops_max: int = Field(default=3, ge=1)
    #: Retries of a lead intake event after its first attempt (the reference's ``max_retries``).
    lead_max_retries: int = Field(default=5, ge=0, le=20)
    #: A site form's field names where they differ from ours: JSON map our field → the form's
    #: (e.g. ``{"email": "e-mail"}``); ours are name, email, company, phone, message, consent,
    #: page.
    site_form_fields: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    #: Seeds lead intake's mode on a fresh installation, and only there (the mode then lives in the
    #: database: ``followup leads go-live`` / ``shadow``). ``shadow`` runs every step and records
    #: what it would have written, writing nothing (``FOLLOWUP_DRY_RUN`` implies it).
    lead_intake_mode: Literal["live", "shadow"] = "shadow"
    #: Where a lead's classification lands in the CRM Lead: JSON map of ours (segment, intent,
    #: priority, summary, language) to the Lead's attribute names; a key left out is not written.
    lead_crm_fields: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=lambda: dict(DEFAULT_LEAD_CRM_FIELDS)
    )
    #: The currencies of the CRM's Currency List (ISO codes, comma-separated or a JSON list): a
    #: payment's amount in one of them is written to the Lead; EspoCRM refuses any other.
    lead_crm_currencies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: When the nightly ``crm_changes`` sweep runs (the team's local time, every day).
    crm_changes_at: time = time(2, 0)
    #: Failed attempts (since its last replay) after which an action waits as a dead letter.
    action_max_attempts: int = Field(default=5, ge=1)
    #: First wait before a failed event is retried; doubles per attempt, with jitter, up to the max.
    event_backoff_base_s: float = Field(default=60.0, ge=0)
    event_backoff_max_s: float = Field(default=3600.0, ge=0)
    #: How long a claim holds an event: a run killed while it holds events frees them after this
    #: (at least 10 s: a lease shorter than a batch's work would let two runs share its events).
    event_lease_s: float = Field(default=900.0, ge=10)
    #: A run that announced a presence in Postgres and has had none for this long (on two
    #: ticks of ``dead_runs`` in a row) is failed: its process is gone (docs/reliability.md).
    dead_run_after_s: float = Field(default=60.0, ge=10)
    #: Events claimed per batch by a ``register`` run.
    event_batch_size: int = Field(default=50, ge=1, le=1000)
    #: How often the ``crm_events`` sensor may look at the event log (at most 30 s by design).
    #: Dagster's sensor loop runs every 5 s at best, so 1 means "at every loop": a webhook
    #: reaches its watch in seconds (docs/benchmarks.md, webhook to watch).
    events_sensor_interval_s: int = Field(default=1, ge=1, le=30)

    @field_validator("lead_crm_fields", mode="before")
    @classmethod
    def _crm_fields_json(cls, value: Any) -> Any:
        return parse_json(value, dict(DEFAULT_LEAD_CRM_FIELDS))

    @field_validator("lead_crm_fields")
    @classmethod
    def _crm_fields(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(CLASSIFICATION_ITEMS))
        if unknown:
            raise ValueError(
                f"unknown item(s) {', '.join(unknown)}; the keys are ours: "
                f"{', '.join(CLASSIFICATION_ITEMS)}"
            )
        bad = sorted(name for name in value.values() if not CRM_ATTRIBUTE.fullmatch(name))
        if bad:
            raise ValueError(f"not an attribute name of a CRM Lead: {', '.join(map(repr, bad))}")
        clash = sorted(set(value.values()) & set(LEAD_OWN_ATTRIBUTES))
        if clash:
            raise ValueError(
                f"{', '.join(clash)} hold(s) the person's own data; choose other attributes"
            )
        return value

    @field_validator("lead_crm_currencies", mode="before")
    @classmethod
    def _currencies_list(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator("lead_crm_currencies")
    @classmethod
    def _currency_codes(cls, value: list[str]) -> list[str]:
        codes = [code.strip().upper() for code in value]
        bad = [code for code in codes if not CURRENCY.fullmatch(code)]
        if bad:
            raise ValueError(f"not a currency code (three letters, e.g. EUR): {', '.join(bad)}")
        return codes

    @field_validator("site_form_fields", mode="before")
    @classmethod
    def _form_fields_json(cls, value: Any) -> Any:
        return parse_json(value, {})

    @field_validator("site_form_fields")
    @classmethod
    def _form_fields(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(FORM_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown field(s) {', '.join(unknown)}; the keys are ours: "
                f"{', '.join(FORM_FIELDS)}"
            )
        return value

    def event_attempts(self, source: str) -> int:
        """Attempts at an event of ``source`` before it becomes a dead letter: the lead intake's
        first attempt and its ``lead_max_retries``, else ``event_max_attempts``."""
        if source in LEAD_SOURCES:
            return self.lead_max_retries + 1
        return self.event_max_attempts

    @field_validator("ops_owner", "ops_backup")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not ADDRESS.fullmatch(value):
            raise ValueError(
                f"{value!r} is not an e-mail address (one address, e.g. ops@acme.example)"
            )
        return value

    def vendor_timeouts(self) -> Timeouts:
        """The vendor clients' timeouts."""
        return Timeouts(self.vendor_timeout_s, self.vendor_connect_timeout_s)

    def in_flight_s(self) -> float:
        """How long an ``attempted``/``unknown`` action is left alone before it is settled."""
        if self.action_in_flight_s is not None:
            return self.action_in_flight_s
        return self.vendor_timeouts().whole_s + self.action_in_flight_margin_s

    def ops_recipients(self) -> list[str]:
        """Who receives alert mails: the owner and the backup, those that are set."""
        return [a for a in (self.ops_owner, self.ops_backup) if a]

    def alert_window(self) -> timedelta:
        """How long repeats of one run failure are held back after its alert."""
        return timedelta(hours=self.alert_window_h)


#: Secret settings that Dagster reads from its process's environment: the resources through
#: ``dg.EnvVar``, the instance's storage through ``dagster.yaml``'s ``env:``.
SECRET_VARIABLES = {
    "database_url": "FOLLOWUP_DATABASE_URL",
    "dagster_pg_url": "FOLLOWUP_DAGSTER_PG_URL",
    "espocrm_api_key": "FOLLOWUP_ESPOCRM_API_KEY",
    "espocrm_hmac_secret": "FOLLOWUP_ESPOCRM_HMAC_SECRET",
    "clickup_token": "FOLLOWUP_CLICKUP_TOKEN",
    "graph_client_secret": "FOLLOWUP_GRAPH_CLIENT_SECRET",
    "mistral_api_key": "FOLLOWUP_MISTRAL_API_KEY",
    "company_lookup_api_key": "FOLLOWUP_COMPANY_LOOKUP_API_KEY",
    "lms_tokens": "FOLLOWUP_LMS_TOKENS",
    "link_keys": "FOLLOWUP_LINK_KEYS",
}


def secret_environment(settings: Settings) -> dict[str, str]:
    """The secrets, as the variables that ``dg.EnvVar`` reads, for a child process's environment.

    ``dg.EnvVar`` reads only the environment of the process that runs the op; a secret read from
    ``.env`` or the secrets folder reaches it because the launcher puts this mapping into the
    environment of the processes it starts. Nothing writes it into this process's ``os.environ``.
    """
    values = {}
    for field, variable in SECRET_VARIABLES.items():
        value = getattr(settings, field)
        if value is not None:
            values[variable] = value.get_secret_value()
    return values


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        field = str(item["loc"][0]) if item["loc"] else ""
        message = str(item["msg"]).removeprefix("Value error, ")
        lines.append(f"{ENV_PREFIX}{field.upper()}: {message}" if field else message)
    return "invalid configuration:\n  " + "\n  ".join(lines)


def load_settings(*, env_file: bool = True, **overrides: Any) -> Settings:
    """Read the settings; raise ``ConfigError`` naming every wrong variable. Without
    ``env_file``, from the environment alone (a simulation's machine, whose world is its own).

    Run inside the checkout (any folder of it), ``.env`` is the checkout's and ``FOLLOWUP_HOME``
    defaults to the checkout's ``.followup``; elsewhere both are taken from the working folder.

    ``FOLLOWUP_SECRETS_DIR`` names a folder of files, one secret a file (Docker/K8s style).
    """
    checkout = find_checkout(Path.cwd())
    where: dict[str, Any] = {"_env_file": (checkout or Path.cwd()) / ".env" if env_file else None}
    secrets_dir = os.environ.get(f"{ENV_PREFIX}SECRETS_DIR")
    if secrets_dir:
        where["_secrets_dir"] = secrets_dir
    try:
        settings = Settings(**where, **overrides)
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None
    if checkout is not None and "home" not in settings.model_fields_set:
        # From any folder of the checkout, the machine is the checkout's own.
        settings = settings.model_copy(update={"home": checkout / ".followup"})
    return settings


#: How the checkout's ``pyproject.toml`` names the project.
PROJECT_LINE = 'name = "followup-pipeline"'


def find_checkout(start: Path) -> Path | None:
    """The checkout this package runs from, when ``start`` lies in it; else None.

    Only the package's own checkout counts: a ``pyproject.toml`` that merely names the project
    in some parent folder (``/tmp`` is anyone's) never supplies a ``.env`` or a home.
    """
    own = Path(__file__).absolute().parent.parent
    try:
        if PROJECT_LINE not in (own / "pyproject.toml").read_text(encoding="utf-8"):
            return None
    except OSError:
        return None  # installed as a package, not run from a checkout
    start = start.absolute()
    return own if start == own or own in start.parents else None
