"""One evaluation's working set: resources, settings, the run's now, and its counts."""

from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import dagster as dg

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.decisions import StagePolicy
from followup_pipeline.domain.localtime import local_date
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store.watches import Plan, load_calendar, load_plan


@dataclass
class Evaluation:
    """What the steps of ``evaluate`` share within one run."""

    postgres: PostgresResource
    crm: EspoCrmClient
    clickup: ClickUpClient
    settings: Settings
    now: datetime
    log: Any
    run_id: str | None = None
    counts: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    #: Watches whose activity could not be read this run: their due steps wait.
    unreadable: set[int] = field(default_factory=set)
    #: ClickUp answered 429 to a write: no more writes this run.
    clickup_rate_limited: bool = False
    _calendar: BusinessCalendar | None = None
    _plan: Plan | None = None

    @property
    def zone(self) -> str:
        return self.settings.timezone

    @property
    def today(self) -> date:
        """The local date of the run's now."""
        return local_date(self.now, self.zone)

    @property
    def calendar(self) -> BusinessCalendar:
        """The business calendar with the database's overrides, read once per run."""
        if self._calendar is None:
            with self.postgres.connection() as conn:
                self._calendar = load_calendar(
                    conn, self.settings.holiday_country, self.settings.holiday_subdivision
                )
        return self._calendar

    @property
    def policy(self) -> StagePolicy:
        s = self.settings
        return StagePolicy(watched=s.watched_stages, won=s.won_stage, lost=s.lost_stage)

    @property
    def plan(self) -> Plan:
        """How new watches are planned now, from the named cadence (a plan is fixed when made)."""
        if self._plan is None:
            with self.postgres.connection() as conn:
                self._plan = load_plan(
                    conn,
                    cadence_name=self.settings.cadence_name,
                    configured_offsets=self.settings.configured_cadence(),
                    time_zone=self.zone,
                    calendar=self.calendar,
                )
        return self._plan

    def crm_url(self, deal_id: str) -> str:
        """The deal's page in the CRM."""
        return self.settings.crm_deal_url(deal_id)

    def problem(self, message: str) -> None:
        """A single item failed: skip it, the run ends ``partial``."""
        self.problems.append(message)
        self.counts["problems"] += 1
        self.log.warning(message)

    def metadata(self) -> dict[str, Any]:
        """Counts and the first problems, as run metadata."""
        data: dict[str, Any] = dict(sorted(self.counts.items()))
        if self.problems:
            data["problem_list"] = dg.MetadataValue.md(
                "\n".join(f"- {p}" for p in self.problems[:50])
            )
        return data
