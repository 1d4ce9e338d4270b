"""Cadences (``cadences``): named lists of business-day offsets, and how new watches are planned."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

import psycopg

from followup_pipeline.domain.cadence import PlannedStep, plan_steps
from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.settings import ConfigError, Settings
from followup_pipeline.store.db import connect
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class Plan:
    """How a new watch is planned: its cadence, the zone of its dates, the calendar."""

    cadence_name: str
    offsets: tuple[int, ...]
    time_zone: str
    calendar: BusinessCalendar
    _steps: dict[date, list[PlannedStep]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def steps_from(self, base_on: date) -> list[PlannedStep]:
        """The steps of a watch based on ``base_on`` (computed once per date: the watches of
        one delivery share it)."""
        if base_on not in self._steps:
            self._steps[base_on] = plan_steps(base_on, self.offsets, self.calendar)
        return self._steps[base_on]


@dataclass(frozen=True)
class Plans:
    """How new watches are planned, by the stage their deal is in: the stage's cadence
    (``FOLLOWUP_STAGE_CADENCES``), else the default one."""

    default: Plan
    by_stage: dict[str, Plan] = field(default_factory=dict)

    def for_stage(self, stage: str) -> Plan:
        """The plan of a new watch of a deal in ``stage``."""
        return self.by_stage.get(stage, self.default)


class UnknownCadence(ConfigError):
    """The configured cadence name has no row in ``cadences``."""


def define_cadence(
    conn: psycopg.Connection[Any], *, name: str, configured: tuple[int, ...] | None
) -> tuple[int, ...]:
    """Write the configured offsets (``FOLLOWUP_CADENCE``, when set) into the row ``name``, then
    return the row's offsets; ``UnknownCadence`` when there is no such row.

    Called once at start (``followup migrate``, ``followup dev``), never by a run: the row is the
    one truth the runs read, and a shell with other settings cannot rewrite it in passing.
    """
    if configured is not None:
        conn.execute(query("upsert_cadence"), {"name": name, "offsets": list(configured)})
    return cadence_offsets(conn, name)


def prepare_cadence(url: str, settings: Settings) -> tuple[int, ...]:
    """Write ``FOLLOWUP_CADENCE`` (when set) into its named row and check the row exists."""
    with connect(url, autocommit=True) as conn, conn.transaction():
        return define_cadence(
            conn, name=settings.cadence_name, configured=settings.configured_cadence()
        )


def load_plan(
    conn: psycopg.Connection[Any], *, cadence_name: str, time_zone: str, calendar: BusinessCalendar
) -> Plan:
    """How new watches are planned now: the offsets of the cadence row ``cadence_name``.

    A plan is fixed when made: a changed row applies to plans made after the change.
    """
    return Plan(cadence_name, cadence_offsets(conn, cadence_name), time_zone, calendar)


def load_plans(
    conn: psycopg.Connection[Any], settings: Settings, *, calendar: BusinessCalendar
) -> Plans:
    """How new watches are planned now, per stage (each cadence read once); ``UnknownCadence``
    naming the setting when a stage names a cadence the table has not."""
    default = load_plan(
        conn, cadence_name=settings.cadence_name, time_zone=settings.timezone, calendar=calendar
    )
    plans = {settings.cadence_name: default}
    by_stage: dict[str, Plan] = {}
    for stage, name in settings.stage_cadences.items():
        if name not in plans:
            try:
                offsets = cadence_offsets(conn, name)
            except UnknownCadence:
                raise UnknownCadence(
                    f"FOLLOWUP_STAGE_CADENCES: stage {stage!r} names the cadence {name!r}, which "
                    "the table cadences has not; add it with `followup cadences set`"
                ) from None
            plans[name] = Plan(name, offsets, settings.timezone, calendar)
        by_stage[stage] = plans[name]
    return Plans(default, by_stage)


def cadence_offsets(conn: psycopg.Connection[Any], name: str) -> tuple[int, ...]:
    """The offsets of the cadence ``name``; ``UnknownCadence`` when there is no such row."""
    row = conn.execute(query("cadence_offsets"), {"name": name}).fetchone()
    if row is None:
        raise UnknownCadence(
            f"FOLLOWUP_CADENCE_NAME: no cadence named {name!r} in the table cadences; "
            "add the row, or set FOLLOWUP_CADENCE to define it (followup migrate writes it)"
        )
    return tuple(row["offsets"])


def cadences(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, ...]]:
    """Every named cadence and its offsets."""
    rows = conn.execute(query("cadence_list")).fetchall()
    return {str(row["name"]): tuple(row["offsets"]) for row in rows}


def set_cadence(conn: psycopg.Connection[Any], name: str, offsets: tuple[int, ...]) -> None:
    """Define the cadence ``name`` (plans made before keep their offsets)."""
    conn.execute(query("upsert_cadence"), {"name": name, "offsets": list(offsets)})
