"""What people read: the morning list, as data in and text out (HTML and plain text, German or
English), rendered from templates with autoescaping. Pure code: no I/O but the templates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Literal
from zoneinfo import ZoneInfo

import jinja2

Language = Literal["de", "en"]

WORDS: dict[Language, dict[str, str]] = {
    "de": {
        "subject": "Follow-ups am {day}",
        "late": "verspätet: ",
        "title": "Follow-ups am {day}",
        "due_today": "Heute fällig",
        "overdue": "Überfällig",
        "summaries": "Neue Zusammenfassungen",
        "closed": "Geschlossen seit der letzten Liste",
        "review": "Offene Prüfungen",
        "review_line": "{n} Antwort(en) des Modells warten auf eine Prüfung: followup review list",
        "health": "Zustand",
        "health_line": (
            "Dead Letters: {dead}; letzter erfolgreicher evaluate-Lauf: {last}; "
            "älteste wartende Nachricht: {oldest}"
        ),
        "never": "noch nie",
        "none": "keine",
        "nothing": "Nichts.",
        "total": "Gesamt",
        "owner_unknown": "ohne Zuständige",
        "step": "Schritt {step} von {count}",
        "in_crm": "im CRM",
        "why": "warum",
        "minutes": "{n} min",
        "paused": "pausiert",
        "crm_error": "CRM-Fehler: {error}",
        "dead_letter": "Dead Letter: followup dead-letters list",
        "waiting": "wartet auf den nächsten Lauf",
        "won": "gewonnen",
        "lost": "verloren",
        "exhausted": "Kadenz ausgeschöpft",
        "subject_gone": "im CRM gelöscht",
        "out_of_scope": "Phase nicht mehr beobachtet",
        "late_note": "Diese Liste wurde nachträglich versandt.",
        "week_subject": "Wochenüberblick {start} – {end}",
        "week_title": "Wochenüberblick {start} – {end}",
        "fired": "Aufgaben angelegt",
        "suppressed": "Übersprungen",
        "opened": "Beobachtungen eröffnet",
        "closed_week": "Beobachtungen geschlossen",
        "open_by_stage": "Offene Beobachtungen nach Phase",
        "age": "Alter (Tage)",
        "count": "Anzahl",
        "oldest": "älteste",
        "failures": "Fehler und Dead Letters der Woche",
        "failed_runs": "fehlgeschlagene Läufe",
        "dead_letters": "Dead Letters",
        "chart": "Aufgaben pro Tag",
        "deal_closed": "Deal geschlossen",
        "superseded": "überholt",
        "dry_run": "Testlauf",
    },
    "en": {
        "subject": "Follow-ups for {day}",
        "late": "late: ",
        "title": "Follow-ups for {day}",
        "due_today": "Due today",
        "overdue": "Overdue",
        "summaries": "New summaries",
        "closed": "Closed since the last list",
        "review": "Open reviews",
        "review_line": "{n} model answer(s) wait for a review: followup review list",
        "health": "Health",
        "health_line": (
            "dead letters: {dead}; last successful evaluate: {last}; oldest pending event: {oldest}"
        ),
        "never": "never",
        "none": "none",
        "nothing": "Nothing.",
        "total": "Total",
        "owner_unknown": "unassigned",
        "step": "step {step} of {count}",
        "in_crm": "in the CRM",
        "why": "why",
        "minutes": "{n} min",
        "paused": "paused",
        "crm_error": "CRM error: {error}",
        "dead_letter": "dead letter: followup dead-letters list",
        "waiting": "waiting for the next run",
        "won": "won",
        "lost": "lost",
        "exhausted": "cadence exhausted",
        "subject_gone": "deleted in the CRM",
        "out_of_scope": "stage no longer watched",
        "late_note": "This list was sent late.",
        "week_subject": "Weekly overview {start} – {end}",
        "week_title": "Weekly overview {start} – {end}",
        "fired": "Tasks created",
        "suppressed": "Skipped",
        "opened": "Watches opened",
        "closed_week": "Watches closed",
        "open_by_stage": "Open watches by stage",
        "age": "age (days)",
        "count": "count",
        "oldest": "oldest",
        "failures": "Failures and dead letters of the week",
        "failed_runs": "failed runs",
        "dead_letters": "dead letters",
        "chart": "Tasks per day",
        "deal_closed": "deal closed",
        "superseded": "superseded",
        "dry_run": "dry run",
    },
}
DATE_FORMAT: dict[Language, str] = {"de": "%d.%m.%Y", "en": "%Y-%m-%d"}


@dataclass(frozen=True)
class StepLine:
    """A due or overdue step of a deal; ``reason`` says why an overdue one waits."""

    deal_name: str
    account_name: str | None
    owner: str | None
    step_no: int
    step_count: int
    due_on: date
    crm_url: str | None
    reason: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class SummaryLine:
    """A deal's new two-line summary."""

    deal_name: str
    owner: str | None
    line1: str
    line2: str
    crm_url: str | None


@dataclass(frozen=True)
class ClosedLine:
    """A watch closed since the last list, and why."""

    deal_name: str
    owner: str | None
    reason: str
    closed_at: datetime


@dataclass(frozen=True)
class Health:
    """The machine's health in one line."""

    dead_letters: int
    last_evaluate_ok: datetime | None
    oldest_pending_s: float | None


@dataclass(frozen=True)
class MorningData:
    """Everything the morning list of ``day`` shows."""

    day: date
    time_zone: str
    due_today: Sequence[StepLine]
    overdue: Sequence[StepLine]
    summaries: Sequence[SummaryLine]
    closed: Sequence[ClosedLine]
    review_open: int
    health: Health
    late: bool = False


@dataclass(frozen=True)
class StageLine:
    """Open watches of one stage: how many, and their average and oldest age in days."""

    stage: str
    count: int
    average_age_days: float
    oldest_age_days: int


@dataclass(frozen=True)
class WeeklyData:
    """Everything the Friday overview of the week ``start``..``end`` shows."""

    start: date
    end: date
    time_zone: str
    fired: int
    suppressed: dict[str, int]
    opened: int
    closed: dict[str, int]
    open_by_stage: Sequence[StageLine]
    failed_runs: int
    dead_letters: int
    tasks_per_day: dict[date, int]
    late: bool = False


@dataclass(frozen=True)
class Rendered:
    """A mail: its subject, HTML and plain text."""

    subject: str
    html: str
    text: str


@dataclass(frozen=True)
class _Group:
    owner: str
    due_today: list[StepLine] = field(default_factory=list)
    overdue: list[StepLine] = field(default_factory=list)


def _environment() -> jinja2.Environment:
    """The templates: ``*.html.j2`` autoescaped, ``*.txt.j2`` plain text (no markup to escape)."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("followup_pipeline.domain", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default=False),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def _groups(data: MorningData, unknown: str) -> list[_Group]:
    groups: dict[str, _Group] = {}
    for line in data.due_today:
        groups.setdefault(line.owner or unknown, _Group(line.owner or unknown)).due_today.append(
            line
        )
    for line in data.overdue:
        groups.setdefault(line.owner or unknown, _Group(line.owner or unknown)).overdue.append(line)
    return [groups[name] for name in sorted(groups)]


def render_morning(data: MorningData, language: Language) -> Rendered:
    """The morning list of ``data.day`` in ``language``, as HTML and plain text."""
    words = WORDS[language]
    zone = ZoneInfo(data.time_zone)
    day = data.day.strftime(DATE_FORMAT[language])

    def when(moment: datetime | None) -> str:
        if moment is None:
            return words["never"]
        return moment.astimezone(zone).strftime(DATE_FORMAT[language] + " %H:%M")

    def reason(line: StepLine) -> str:
        if line.reason == "crm_error":
            return words["crm_error"].format(error=line.detail or "")
        return words.get(line.reason or "waiting", line.reason or "")

    oldest = data.health.oldest_pending_s
    health = words["health_line"].format(
        dead=data.health.dead_letters,
        last=when(data.health.last_evaluate_ok),
        oldest=words["minutes"].format(n=round(oldest / 60)) if oldest else words["none"],
    )
    context = {
        "w": words,
        "day": day,
        "data": data,
        "groups": _groups(data, words["owner_unknown"]),
        "reason": reason,
        "when": when,
        "closed_reason": lambda r: words.get(r, r),
        "date": lambda d: d.strftime(DATE_FORMAT[language]),
        "health": health,
    }
    subject = (words["late"] if data.late else "") + words["subject"].format(day=day)
    templates = _environment()
    html = templates.get_template("morning.html.j2").render(**context)
    text = templates.get_template("morning.txt.j2").render(**context)
    return Rendered(subject=subject, html=html, text=text)


#: The widest bar of the chart, in table cells (Outlook renders tables, not CSS widths).
BAR_CELLS = 20


def render_weekly(data: WeeklyData, language: Language) -> Rendered:
    """The Friday overview in ``language``: counts, open watches by stage, and a bar chart of
    the week's tasks per day drawn with table cells."""
    words = WORDS[language]
    fmt = DATE_FORMAT[language]
    start, end = data.start.strftime(fmt), data.end.strftime(fmt)
    most = max(data.tasks_per_day.values(), default=0)
    bars = [
        (day.strftime(fmt), count, round(BAR_CELLS * count / most) if most else 0)
        for day, count in sorted(data.tasks_per_day.items())
    ]
    context = {
        "w": words,
        "start": start,
        "end": end,
        "data": data,
        "bars": bars,
        "word": lambda key: words.get(key, key),
    }
    subject = (words["late"] if data.late else "") + words["week_subject"].format(
        start=start, end=end
    )
    templates = _environment()
    html = templates.get_template("weekly.html.j2").render(**context)
    text = templates.get_template("weekly.txt.j2").render(**context)
    return Rendered(subject=subject, html=html, text=text)
