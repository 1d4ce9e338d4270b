"""The weekly operations look (docs/operations.md, "The weekly look"): a short mail to the
operations owner and backup, and to each academy's owner about its academy, in the team's
language: what failed and why, grouped by cause (the step and the kind of error), what waits for
whom and since when, what was suppressed by reason, the degraded runs by vendor, the census of
the watched stages, and the account's unaccounted count. Data in, HTML and text out (Jinja, HTML
autoescaped, as the reports). Pure: ``defs/alerts/ops_week.py`` gathers it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from zoneinfo import ZoneInfo

from followup_pipeline.domain.census import StageView
from followup_pipeline.domain.report_data import Rendered
from followup_pipeline.domain.report_words import WORDS as REPORT_WORDS
from followup_pipeline.domain.report_words import Language
from followup_pipeline.domain.reports import environment
from followup_pipeline.domain.text import cut_at_word

#: ``espocrm: HTTP 503 on GET …``: the vendor and the status make the kind of an error.
_VENDOR_STATUS = re.compile(r"\b(?P<vendor>[a-z][\w-]*): (?:[^:]*?)(?P<status>HTTP \d{3})")
_CLASS = re.compile(r"^(?P<cls>[A-Z]\w*(?:Error|Exception|Failure))\b")
_VENDOR = re.compile(r"^(?P<vendor>[a-z][\w-]*): ")


def error_kind(error: str | None) -> str:
    """What kind of error ``error`` is, to group failures by: the vendor and its HTTP status
    (``espocrm HTTP 503``), the exception's class, the vendor alone, else its first words;
    empty for none."""
    if not error or not error.strip():
        return ""  # (said in the mail's language)
    text = " ".join(error.split())
    if found := _VENDOR_STATUS.search(text):
        return f"{found['vendor']} {found['status']}"
    if found := _CLASS.match(text):
        return found["cls"]
    if found := _VENDOR.match(text):
        return f"{found['vendor']}: {cut_at_word(text[found.end() :], 40)}"
    return cut_at_word(text, 60)


@dataclass(frozen=True)
class Cause:
    """Failures of one cause: the pipeline, the step they stopped at, the kind of error, how
    many, one of them (what it is, its error as said)."""

    pipeline: str
    step: str | None
    kind: str
    count: int
    example: str
    error: str


@dataclass(frozen=True)
class Owed:
    """What waits for one owner: how many items, of which kinds, since when (the oldest)."""

    owner: str
    items: int
    kinds: Mapping[str, int]
    oldest: datetime


@dataclass(frozen=True)
class Degraded:
    """The runs of one job that ended ``partial`` for one vendor in the week, and the first
    cause said."""

    job: str
    vendor: str
    runs: int
    cause: str


@dataclass(frozen=True)
class OpsWeek:
    """The week's look: its days, and what it says (an academy's: ``tenant``, its own items)."""

    start: date
    end: date
    zone: str
    failures: list[Cause] = field(default_factory=list)
    waiting: list[Owed] = field(default_factory=list)
    suppressed: Mapping[str, int] = field(default_factory=dict)
    degraded: list[Degraded] = field(default_factory=list)
    census: list[StageView] = field(default_factory=list)
    #: None: not counted (an academy's look says only what is unaccounted of its own).
    due: int | None = 0
    unaccounted: int = 0
    unaccounted_named: list[str] = field(default_factory=list)
    tenant: str | None = None


WORDS: dict[Language, dict[str, str]] = {
    "de": {
        "subject": "Betrieb, Woche vom {start} bis {end}: Fehler {failed}, offen {waiting}, "
        "ohne Verbleib {unaccounted}",
        "subject_tenant": "Akademie {tenant}, Woche vom {start} bis {end}: Fehler {failed}, "
        "offen {waiting}",
        "title": "Der Betrieb in der Woche vom {start} bis {end}",
        "title_tenant": "Akademie {tenant}: die Woche vom {start} bis {end}",
        "failed": "Was fehlschlug, und warum",
        "failed_none": "Nichts schlug fehl.",
        "cause": "{n}× {pipeline}{step}: {kind}",
        "example": "z. B. {what}: {error}",
        "example_only": "z. B. {what}",
        "no_error": "ohne Fehlermeldung",
        "waiting": "Was wartet, auf wen, seit wann",
        "waiting_none": "Nichts wartet auf eine Person.",
        "owed": "{owner}: {n} ({kinds}), das älteste seit {oldest}",
        "suppressed": "Bewusst nicht gesendet, nach Grund",
        "suppressed_none": "Nichts.",
        "degraded": "Läufe mit übersprungener Arbeit, nach Anbieter",
        "degraded_none": "Keiner: jeder Lauf lief sauber durch.",
        "degraded_line": "{job}: {runs} Läufe wegen {vendor}; zuerst: {cause}",
        "census": "Die beobachteten Phasen (Zählung)",
        "census_listed": "{n} jetzt im CRM",
        "census_none": "noch nicht gezählt",
        "census_weeks": "neu je Woche, diese zuerst: {weeks}",
        "account": "Fällige Aktionen: {due}, davon ohne Verbleib: {unaccounted}",
        "account_own": "Ohne Verbleib: {unaccounted}",
        "account_named": "Ohne Verbleib: {names}",
        "commands": "Einzeln: followup work list · followup account --since 7d · "
        "followup alerts list",
    },
    "en": {
        "subject": "Operations, week of {start} to {end}: failed {failed}, waiting {waiting}, "
        "unaccounted {unaccounted}",
        "subject_tenant": "Academy {tenant}, week of {start} to {end}: failed {failed}, "
        "waiting {waiting}",
        "title": "Operations in the week of {start} to {end}",
        "title_tenant": "Academy {tenant}: the week of {start} to {end}",
        "failed": "What failed, and why",
        "failed_none": "Nothing failed.",
        "cause": "{n}× {pipeline}{step}: {kind}",
        "example": "e.g. {what}: {error}",
        "example_only": "e.g. {what}",
        "no_error": "no error recorded",
        "waiting": "What waits, for whom, since when",
        "waiting_none": "Nothing waits for a person.",
        "owed": "{owner}: {n} ({kinds}), the oldest since {oldest}",
        "suppressed": "Deliberately not sent, by reason",
        "suppressed_none": "Nothing.",
        "degraded": "Runs that skipped work, by vendor",
        "degraded_none": "None: every run ended clean.",
        "degraded_line": "{job}: {runs} runs because of {vendor}; first: {cause}",
        "census": "The watched stages (census)",
        "census_listed": "{n} in the CRM now",
        "census_none": "not counted yet",
        "census_weeks": "entered by week, this week first: {weeks}",
        "account": "Actions due: {due}, unaccounted: {unaccounted}",
        "account_own": "Unaccounted: {unaccounted}",
        "account_named": "Unaccounted: {names}",
        "commands": "One by one: followup work list · followup account --since 7d · "
        "followup alerts list",
    },
}
DATE_FORMAT: dict[Language, str] = {"de": "%d.%m.%Y", "en": "%Y-%m-%d"}
#: Causes, owners and names a mail shows at most (the commands list them all).
SHOWN = 12


def render_ops_week(data: OpsWeek, language: Language) -> Rendered:
    """The week's look in ``language``."""
    words = WORDS[language]
    fmt = DATE_FORMAT[language]
    zone = ZoneInfo(data.zone)
    start, end = data.start.strftime(fmt), data.end.strftime(fmt)
    failed = sum(cause.count for cause in data.failures)
    waiting = sum(owed.items for owed in data.waiting)
    causes = [
        (
            words["cause"].format(
                n=cause.count,
                pipeline=cause.pipeline,
                step=f" ({cause.step})" if cause.step else "",
                kind=cause.kind or words["no_error"],
            ),
            words["example"].format(what=cause.example, error=cut_at_word(cause.error, 160))
            if cause.error.strip()
            else words["example_only"].format(what=cause.example),
        )
        for cause in sorted(data.failures, key=lambda c: (-c.count, c.pipeline, c.kind))[:SHOWN]
    ]
    owed = [
        words["owed"].format(
            owner=item.owner,
            n=item.items,
            kinds=", ".join(f"{kind} {n}" for kind, n in sorted(item.kinds.items())),
            oldest=item.oldest.astimezone(zone).strftime(f"{fmt} %H:%M"),
        )
        for item in sorted(data.waiting, key=lambda o: (-o.items, o.owner))[:SHOWN]
    ]
    degraded = [
        words["degraded_line"].format(
            job=d.job, runs=d.runs, vendor=d.vendor, cause=cut_at_word(d.cause, 160)
        )
        for d in sorted(data.degraded, key=lambda d: (-d.runs, d.job, d.vendor))
    ]
    title = (
        words["title_tenant"].format(tenant=data.tenant, start=start, end=end)
        if data.tenant
        else words["title"].format(start=start, end=end)
    )
    subject = (
        words["subject_tenant"].format(
            tenant=data.tenant, start=start, end=end, failed=failed, waiting=waiting
        )
        if data.tenant
        else words["subject"].format(
            start=start, end=end, failed=failed, waiting=waiting, unaccounted=data.unaccounted
        )
    )
    context = {
        "w": words,
        "data": data,
        "title": title,
        "causes": causes,
        "owed": owed,
        "degraded": degraded,
        "suppressed": [
            (REPORT_WORDS[language].get(reason, reason), n)
            for reason, n in sorted(data.suppressed.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "census": [
            (
                view.stage,
                (
                    words["census_none"]
                    if view.listed is None
                    else words["census_listed"].format(n=view.listed)
                )
                + "; "
                + words["census_weeks"].format(weeks=", ".join(map(str, view.entered_by_week))),
            )
            for view in data.census
        ],
        "account": (
            words["account_own"].format(unaccounted=data.unaccounted)
            if data.due is None
            else words["account"].format(due=data.due, unaccounted=data.unaccounted)
        ),
        "named": ", ".join(data.unaccounted_named[:SHOWN]),
    }
    templates = environment()
    html = templates.get_template("ops_week.html.j2").render(**context)
    text = templates.get_template("ops_week.txt.j2").render(**context)
    return Rendered(subject=subject, html=html, text=text)
