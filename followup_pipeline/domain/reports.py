"""What people read: the morning list (the team's, and each salesperson's own) and the Friday
overview, as data in and text out (HTML and plain text, German or English), rendered from
templates with autoescaping. Pure code: no I/O but the templates. The words are in
``report_words.py``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

import jinja2

from followup_pipeline.domain.report_data import (
    ClosedLine,
    CrmReading,
    Health,
    LeadCount,
    LeadWeek,
    MorningData,
    Rendered,
    StageLine,
    StepLine,
    SummaryLine,
    WeeklyData,
    after,
    has_work,
    lead_section,
    personal,
)
from followup_pipeline.domain.report_deals import QuietDeal
from followup_pipeline.domain.report_words import DATE_FORMAT, WEEKDAYS, WORDS, Language
from followup_pipeline.domain.tasks import CONTACT_WORDS, RECORDED_KINDS, ago_text, day_text
from followup_pipeline.domain.text import account_shown, clean_text

__all__ = [
    "ClosedLine",
    "CrmReading",
    "Health",
    "Language",
    "LeadCount",
    "LeadWeek",
    "MorningData",
    "Rendered",
    "StageLine",
    "StepLine",
    "SummaryLine",
    "WeeklyData",
    "has_work",
    "lead_rows",
    "lead_section",
    "personal",
    "render_morning",
    "render_weekly",
]

#: Legal forms left out when deciding whether a deal's name already names its account.


@dataclass
class _Group:
    owner: str
    due_today: list[StepLine] = field(default_factory=list)
    overdue: list[StepLine] = field(default_factory=list)


@cache
def environment() -> jinja2.Environment:
    """The templates: ``*.html.j2`` autoescaped, ``*.txt.j2`` plain text (no markup to escape);
    made once, each template compiled once."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("followup_pipeline.domain", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default=False),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def _groups(data: MorningData, unknown: str) -> list[_Group]:
    """The steps by salesperson, the unassigned last; a personal list is one group."""
    groups: dict[str, _Group] = {}
    for line in data.steps:
        name = line.owner or unknown
        group = groups.setdefault(name, _Group(name))
        (group.due_today if line.section == "today" else group.overdue).append(line)
    names = sorted(groups, key=lambda n: (n == unknown, n.casefold()))
    return [groups[name] for name in names]


def amount_of(amount: Decimal | float | None, currency: str | None, language: Language) -> str:
    """``15.000 EUR`` / ``15,000 EUR`` (cents only when there are some); ``—`` without."""
    if amount is None or not math.isfinite(float(amount)):
        return "—"
    value = float(amount)
    number = f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"
    if language == "de":
        number = number.replace(",", "_").replace(".", ",").replace("_", ".")
    code = clean_text(currency or "")[:8]
    return f"{number} {code}" if code else number


def counted(words: dict[str, str], key: str, n: int) -> str:
    """The phrase ``key`` for ``n`` things: its singular form (``key_1``) for one."""
    return words.get(f"{key}_1", words[key]) if n == 1 else words[key]


def _sentence(text: str) -> str:
    """``text`` with a capital first letter: it starts a line."""
    return text[:1].upper() + text[1:]


def _contact(line: StepLine, today: date, zone: str, language: Language) -> str:
    """``E-Mail am 27. Februar (vor 3 Tagen)``, or since when there was none."""
    words = WORDS[language]
    if line.contact_at is None:
        on = line.started_on
        return words["no_contact"].format(
            day=day_text(on, language, today), ago=ago_text(on, language, today)
        )
    on = line.contact_at.astimezone(ZoneInfo(zone)).date()
    kind = RECORDED_KINDS.get(line.contact_kind or "", "activity")
    return words["contact"].format(
        contact=CONTACT_WORDS[language].get(kind, kind),
        day=day_text(on, language, today),
        ago=ago_text(on, language, today),
    )


def _prefix(words: dict[str, str], *, preview: bool, late: bool) -> str:
    """A preview says so and is never late (it is not sent); a late list says it is."""
    if preview:
        return words["preview"]
    return words["late"] if late else ""


def render_morning(data: MorningData, language: Language) -> Rendered:
    """The morning list of ``data.day`` in ``language``, as HTML and plain text: the team's (by
    salesperson, with the machine's health) or one salesperson's."""
    words = WORDS[language]
    zone = ZoneInfo(data.time_zone)
    day = data.day.strftime(DATE_FORMAT[language])

    def when(moment: datetime | None) -> str:
        if moment is None:
            return words["never"]
        return f"{moment.astimezone(zone):{DATE_FORMAT[language]} %H:%M %Z}"

    def step(line: StepLine) -> str:
        """``2 von 3``, with its due date when it is not today, and why a step without a task
        waits."""
        text = words["step"].format(step=line.step_no, count=line.step_count)
        if line.due_on != data.day:
            key = "due_since" if line.due_on < data.day else "due_on"
            text += ", " + words[key].format(day=day_text(line.due_on, language, data.day))
        if line.reason is not None:
            text += f": {words.get(line.reason, words['waiting'])}"
        return text

    health = data.health
    if health.crm_unreachable_since is not None:
        # The latest runs could not read the CRM: said first, with what waits for it.
        waiting = sum(1 for s in data.steps if s.reason in ("crm_error", "waiting"))
        key = {"partial": "health_crm_partial", "failed": "health_crm_failed"}
        health_line = words[key.get(health.crm_state or "", "health_crm_down")].format(
            since=when(health.crm_unreachable_since), last=when(health.last_evaluate_ok)
        )
        if waiting:
            health_line += " " + counted(words, "health_crm_waiting", waiting).format(n=waiting)
        if health.dead_letters:
            health_line += " " + counted(words, "health_cases_only", health.dead_letters).format(
                n=health.dead_letters
            )
    elif health.dead_letters:
        health_line = counted(words, "health_cases", health.dead_letters).format(
            n=health.dead_letters, last=when(health.last_evaluate_ok)
        )
    else:
        health_line = words["health_ok"].format(last=when(health.last_evaluate_ok))
    if health.oldest_pending_s and health.oldest_pending_s >= 300:
        health_line += words["health_queue"].format(minutes=round(health.oldest_pending_s / 60))
    listed = {s.deal_id for s in data.steps}
    links = _Links()
    context: dict[str, Any] = {
        "w": words,
        "lang": language,
        "day": day,
        "data": data,
        "groups": _groups(data, words["owner_unknown"]),
        "team": data.person is None,
        "account": account_shown,
        "amount": lambda line: amount_of(line.amount, line.currency, language),
        "contact": lambda line: _contact(line, data.day, data.time_zone, language),
        "step": step,
        "when": when,
        "closed_reason": lambda r: words.get(r, r),
        "summaries": [
            s for s in data.summaries if s.deal_id not in listed and after(s.written_at, data.since)
        ],
        "closed": [c for c in data.closed if after(c.closed_at, data.since)],
        "health": health_line,
        "review": counted(words, "review", data.review_open).format(n=data.review_open),
        "link": links.ref,
        "links": links.items,
    }
    subject_key = "subject" if data.person is None else "subject_personal"
    subject = _prefix(words, preview=data.preview, late=data.late) + words[subject_key].format(
        day=day
    )
    templates = environment()
    html = templates.get_template("morning.html.j2").render(**context)
    text = templates.get_template("morning.txt.j2").render(**context)
    return Rendered(subject=subject, html=html, text=text)


class _Links:
    """The plain-text part's links as numbered references (``[1]``), listed at its end, so
    that its lines read as sentences and not as URLs."""

    def __init__(self) -> None:
        self._refs: dict[str, int] = {}

    def ref(self, url: str | None) -> str:
        if not url:
            return ""
        number = self._refs.setdefault(url, len(self._refs) + 1)
        return f"[{number}]"

    def items(self) -> list[tuple[int, str]]:
        return [(number, url) for url, number in self._refs.items()]


#: The widest bar of the chart, in table cells (Outlook renders tables, not CSS widths).
BAR_CELLS = 20


def lead_rows(leads: LeadWeek, language: Language) -> list[tuple[str, int]]:
    """The lead section's lines of the overview, as (what, count): the leads received, by
    source and by priority; the new people; the CRM writes by state; what waits for the
    operations team (a review, and the leads stuck, by step). A headline figure shows even at
    0, a breakdown line only when it counts something."""
    words = WORDS[language]
    received = words["leads_in"]
    rows = [(received, leads.total)]
    rows += [
        (f"{received}: {words.get(f'lead_source_{source}', source)}", n)
        for source, n in leads.by_source.items()
    ]
    rows += [
        (
            f"{received}: "
            + (words["lead_priority"].format(priority=p) if p else words["lead_unclassified"]),
            n,
        )
        for p, n in leads.by_priority.items()
    ]
    rows.append((words["new_people"], leads.new_people))
    states = leads.crm_states
    rows.append((words["crm_written"], states.pop("written")))
    rows += [(words[f"crm_{state}"], n) for state, n in states.items() if n]
    rows.append((words["lead_review"], leads.in_review))
    rows.append((words["lead_stuck"], leads.stuck_total))
    rows += [
        (f"{words['lead_stuck_at']}: {words[f'lead_step_{step}']}", n)
        for step, n in leads.stuck_by_step.items()
    ]
    return rows


#: How many deals each of the Friday's lists names (the rest counted).
DEALS_SHOWN = 10


def _deal_sections(data: WeeklyData, language: Language) -> list[tuple[str, int, list[str]]]:
    """The week's deals by name, one line each: won and lost with their amounts, those that
    entered and left follow-up (why)."""
    words = WORDS[language]
    zone = ZoneInfo(data.time_zone)
    sections = []
    deals = data.deals
    kinds = (("deals_won", deals.won), ("deals_lost", deals.lost),
             ("deals_entered", deals.entered), ("deals_left", deals.left))  # fmt: skip
    for key, lines in kinds:
        shown = []
        for line in lines:
            day = line.at.astimezone(zone).date()
            text = f"{line.deal_name} ({line.owner or words['owner_unknown']})"
            if line.amount is not None:
                text += f", {amount_of(line.amount, line.currency, language)}"
            if key == "deals_left":
                text += f", {words.get(line.what, line.what)}"
            text += ", " + words["on_day"].format(day=day_text(day, language, data.end))
            shown.append(text)
        if len(shown) > DEALS_SHOWN:  # the first Friday after adopting forty deals: a count
            more = len(shown) - DEALS_SHOWN
            shown = [*shown[:DEALS_SHOWN], words["deals_more"].format(n=more)]
        sections.append((words[key], len(lines), shown))
    return sections


def _quiet_since(deal: QuietDeal, data: WeeklyData, language: Language) -> str:
    """``E-Mail am 27. Februar (vor 3 Tagen)``, or since when there was none."""
    words = WORDS[language]
    key = "quiet_none" if deal.contact_at is None else "quiet_last"
    if deal.contact_at is None:
        day = deal.started_on
    else:
        day = deal.contact_at.astimezone(ZoneInfo(data.time_zone)).date()
    return words[key].format(
        day=day_text(day, language, data.end), ago=ago_text(day, language, data.end)
    )


def render_weekly(data: WeeklyData, language: Language) -> Rendered:
    """The Friday overview in ``language``: counts, deals followed up by stage, the lead intake
    (when there is one), and a bar chart of the tasks per business day drawn with table cells."""
    words = WORDS[language]
    fmt = DATE_FORMAT[language]
    start, end = data.start.strftime(fmt), data.end.strftime(fmt)
    most = max(data.tasks_per_day.values(), default=0)
    label: Callable[[date], str] = lambda d: f"{WEEKDAYS[language][d.weekday()]} {d:{fmt}}"  # noqa: E731
    bars = [
        (label(day), count, round(BAR_CELLS * count / most) if most else 0)
        for day, count in sorted(data.tasks_per_day.items())
    ]
    context = {
        "w": words,
        "lang": language,
        "start": start,
        "end": end,
        "data": data,
        "bars": bars,
        "deal_sections": _deal_sections(data, language),
        "owner_values": [
            (
                v.owner or words["owner_unknown"],
                counted(words, "deals", v.deals).format(n=v.deals),
                amount_of(v.amount, v.currency, language),
            )
            for v in data.deals.value_by_owner
        ],
        "quiet": [
            (q.deal_name, q.owner or words["owner_unknown"], _quiet_since(q, data, language))
            for q in data.deals.quiet
        ],
        "leads": data.leads,
        "lead_rows": lead_rows(data.leads, language) if data.leads else [],
        "word": lambda key: words.get(key, key),
        "number": lambda value: f"{value:.1f}".replace(".", "," if language == "de" else "."),
        "failures": _sentence(
            ", ".join(
                counted(words, key, n).format(n=n)
                for key, n in (("failed_runs", data.failed_runs), ("cases", data.dead_letters))
            )
        ),
    }
    subject = _prefix(words, preview=data.preview, late=data.late) + words["week_subject"].format(
        start=start, end=end
    )
    templates = environment()
    html = templates.get_template("weekly.html.j2").render(**context)
    text = templates.get_template("weekly.txt.j2").render(**context)
    return Rendered(subject=subject, html=html, text=text)
