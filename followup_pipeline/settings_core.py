"""The settings of storage, time and calendar, and the deals watched and reported on: the first
fields of ``Settings`` (``settings.py``), which reads them with the vendors' and its own."""

from __future__ import annotations

import json
import re
import zoneinfo
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import holidays
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode

from followup_pipeline.domain.cadence import validate_offsets


def split_list(value: Any) -> Any:
    """Accept a JSON list or a comma-separated string for list settings."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


#: One e-mail address, as the settings take it (no list separators, a dotted domain).
ADDRESS = re.compile(r"[^@\s,;]+@[^@\s,;]+\.[^@\s,;]+")


#: Where a machine notes the day it first started (``partitions_start_on``).
FIRST_DAY_FILE = "first-day"


class CoreSettings(BaseSettings):
    """Where the machine keeps its data, its calendar and cadence, and the deals it follows."""

    # --- storage -----------------------------------------------------------------------------
    database_url: SecretStr | None = None
    home: Path = Path(".followup")
    dagster_pg_url: SecretStr | None = None

    # --- time and calendar ---------------------------------------------------------------------
    timezone: str = "Europe/Berlin"
    holiday_country: str = "DE"
    holiday_subdivision: str | None = None
    now: datetime | None = None
    #: The hour at which the working day begins: a follow-up task is due then on its day.
    business_hours_start: int = Field(default=7, ge=0, le=23)
    #: The hours of a business day in which ``evaluate`` runs (and its partitions): every hour by
    #: default, so a lost webhook matters for an hour at most, day and night.
    evaluate_hours_start: int = Field(default=0, ge=0, le=23)
    evaluate_hours_end: int = Field(default=24, ge=1, le=24)
    #: Gone: it bounded ``evaluate``'s hours, which ``evaluate_hours_*`` do now. Set, it stops
    #: the start with a message saying so, rather than being ignored in silence.
    business_hours_end: int | None = None
    #: The first day of the Dagster partitions (business hours, business days); unset: the first
    #: day of the previous month, so the Partitions tab shows recent hours, not years of nights.
    partitions_start: date | None = None
    #: The row of the table ``cadences`` that plans new watches (seeded: ``default`` = 5, 12, 21).
    cadence_name: str = Field(default="default", min_length=1)
    #: When set, defines the offsets of the cadence ``cadence_name`` (written to its row).
    cadence: Annotated[list[int], NoDecode] = [5, 12, 21]
    #: A cadence per stage, when the admin wants one: JSON map stage → the name of a row of
    #: ``cadences`` (``followup cadences set``); a stage not named plans by ``cadence_name``.
    stage_cadences: Annotated[dict[str, str], NoDecode] = {}
    exhaust_after: int = Field(default=5, ge=0)

    # --- the deals we watch ----------------------------------------------------------------------
    watched_stages: Annotated[list[str], NoDecode] = ["Proposal", "Negotiation"]
    #: On the machine's first ``evaluate``: deals that entered a watched stage up to this many
    #: days before are followed up from when they entered (catch-up tasks at once); 0: deals
    #: already in an offer stage start when the machine starts.
    adopt_days: int = Field(default=0, ge=0, le=366)
    won_stage: str = "Closed Won"
    lost_stage: str = "Closed Lost"
    #: Who receives the team's morning list and the Friday overview (e-mail addresses).
    report_recipients: Annotated[list[str], NoDecode] = []
    #: Each salesperson's own morning list: JSON map CRM user id → e-mail address.
    salesperson_addresses: Annotated[dict[str, str], NoDecode] = {}
    #: The language of the reports.
    report_language: Literal["de", "en"] = "de"
    #: A salesperson's own morning list in their own language: JSON map CRM user id → ``de`` or
    #: ``en`` (one not named reads the team's, ``report_language``).
    salesperson_languages: Annotated[dict[str, Literal["de", "en"]], NoDecode] = {}
    #: When the morning list goes out (local time, business days).
    morning_report_at: time = time(7, 30)
    #: When the Friday overview goes out (local time); its week ends then.
    weekly_report_at: time = time(15, 0)
    dry_run: bool = False

    @field_validator("watched_stages", "report_recipients", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator(
        "salesperson_addresses", "stage_cadences", "salesperson_languages", mode="before"
    )
    @classmethod
    def _address_map(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            return json.loads(text) if text else {}
        return value

    @field_validator("salesperson_addresses")
    @classmethod
    def _addresses(cls, value: dict[str, str]) -> dict[str, str]:
        for user, address in value.items():
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", user):
                raise ValueError(
                    f"{user!r} is not a CRM user id (letters, digits, '_' and '-', at most 64): "
                    "the keys of FOLLOWUP_SALESPERSON_ADDRESSES are EspoCRM user ids"
                )
            if not ADDRESS.fullmatch(address.strip()):
                raise ValueError(
                    f"{address!r} (CRM user {user!r}) is not an e-mail address; expected a JSON "
                    'map of CRM user id to one address, e.g. {"5f1a0c2b": "sabine@acme.example"}'
                )
        return {user: address.strip() for user, address in value.items()}

    @field_validator("cadence", mode="before")
    @classmethod
    def _cadence(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator("home", mode="after")
    @classmethod
    def _absolute_home(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; allowed: an IANA name such as Europe/Berlin"
            ) from None
        return value

    @field_validator("holiday_country")
    @classmethod
    def _known_country(cls, value: str) -> str:
        countries = holidays.list_supported_countries()
        if value not in countries:
            raise ValueError(
                f"unknown holiday country {value!r}; allowed: ISO codes such as "
                f"{', '.join(sorted(c for c in countries if len(c) == 2))}"
            )
        return value

    @field_validator("cadence")
    @classmethod
    def _increasing(cls, value: list[int]) -> list[int]:
        return list(validate_offsets(value))

    @field_validator("watched_stages")
    @classmethod
    def _some_stage(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one watched stage is needed")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.holiday_subdivision is not None:
            subdivisions = holidays.list_supported_countries()[self.holiday_country]
            if self.holiday_subdivision not in subdivisions:
                raise ValueError(
                    "FOLLOWUP_HOLIDAY_SUBDIVISION: unknown subdivision "
                    f"{self.holiday_subdivision!r} "
                    f"of {self.holiday_country}; allowed: {', '.join(subdivisions)}"
                )
        if self.business_hours_end is not None:
            raise ValueError(
                "FOLLOWUP_BUSINESS_HOURS_END is gone: evaluate runs every hour of a business day "
                "by default; to keep a window, set FOLLOWUP_EVALUATE_HOURS_START and "
                "FOLLOWUP_EVALUATE_HOURS_END instead"
            )
        if self.evaluate_hours_end <= self.evaluate_hours_start:
            raise ValueError(
                "FOLLOWUP_EVALUATE_HOURS_END must be after FOLLOWUP_EVALUATE_HOURS_START"
            )
        if self.partitions_start is not None and self.partitions_start > date.today():
            raise ValueError(
                f"FOLLOWUP_PARTITIONS_START {self.partitions_start} is in the future: the "
                "schedules could not name the partition of their ticks"
            )
        if self.now is not None and self.now.tzinfo is None:
            raise ValueError(
                "FOLLOWUP_NOW needs an offset, e.g. 2026-03-02T09:00:00+01:00 (ISO 8601)"
            )
        return self

    def partitions_start_on(self, today: date | None = None) -> date:
        """The first day of the partitions: the setting, else the machine's first week (noted
        in ``FOLLOWUP_HOME/first-day`` when its first start made its database: no "missing"
        hours from before it existed), else the previous month's first day."""
        if self.partitions_start is not None:
            return self.partitions_start
        day = today or datetime.now(zoneinfo.ZoneInfo(self.timezone)).date()
        try:
            noted = date.fromisoformat((self.home / FIRST_DAY_FILE).read_text("utf-8").strip())
        except (OSError, ValueError):
            noted = None
        if noted is not None and noted <= day:  # (a date ahead: a copied home, a moved clock)
            return noted
        previous = day.replace(day=1) - timedelta(days=1)
        return previous.replace(day=1)

    def cadence_for(self, stage: str) -> str:
        """The cadence that plans a new watch of a deal in ``stage``."""
        return self.stage_cadences.get(stage, self.cadence_name)

    def configured_cadence(self) -> tuple[int, ...] | None:
        """The offsets of ``FOLLOWUP_CADENCE`` when it was set, else None (the table decides)."""
        return tuple(self.cadence) if "cadence" in self.model_fields_set else None
