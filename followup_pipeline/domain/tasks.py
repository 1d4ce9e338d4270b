"""What a follow-up task says, in the team's language (``de`` or ``en``): what to do and why now
(the step, the last contact and how long ago it was), the deal with its account, stage and
amount, the two-line summary and the CRM link; and the comment on a task that Followup closes."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Literal
from urllib.parse import urlsplit

from followup_pipeline.domain.text import account_shown

Language = Literal["de", "en"]
#: What the last contact was: activity the CRM shows (an e-mail, a call, a meeting held), a task
#: someone completed in ClickUp (``task``, with ``FOLLOWUP_CLICKUP_COMPLETION_RESETS``), a reset
#: whose kind was not recorded (``activity``), or none since the follow-up began (``none``).
ContactKind = Literal["email", "call", "meeting", "task", "activity", "none"]

MONTHS: dict[Language, tuple[str, ...]] = {
    "de": (
        "Januar", "Februar", "März", "April", "Mai", "Juni",
        "Juli", "August", "September", "Oktober", "November", "Dezember",
    ),
    "en": (
        "January", "February", "March", "April", "May", "June",
        "July", "August", "September", "October", "November", "December",
    ),
}  # fmt: skip
#: Activity kinds as recorded (``watches.last_reset_kind``); anything else is ``activity``.
RECORDED_KINDS: dict[str, ContactKind] = {
    "email": "email", "call": "call", "meeting": "meeting", "task": "task",
}  # fmt: skip
#: Each kind as it reads before "am {day}" / "on {day}": "Letzter Kontakt gestern: Aufgabe in
#: ClickUp erledigt am 10. März." / "Last contact yesterday: task completed in ClickUp on 10 March."
CONTACT_WORDS: dict[Language, dict[str, str]] = {
    "de": {"email": "E-Mail", "call": "Anruf", "meeting": "Termin",
           "task": "Aufgabe in ClickUp erledigt", "activity": "Aktivität"},
    "en": {"email": "e-mail", "call": "call", "meeting": "meeting",
           "task": "task completed in ClickUp", "activity": "activity"},
}  # fmt: skip
#: Why a watch closed, as a sentence ends (English; ``followup watches explain`` says it too).
CLOSE_WORDS = {
    "won": "the deal was won",
    "lost": "the deal was lost",
    "exhausted": "every follow-up step was done and the deal went quiet",
    "subject_gone": "the deal was deleted in the CRM",
    "out_of_scope": "the deal left the watched stages",
    "unwatched": "an operator stopped the follow-up of this deal",
}
#: The comment on a task that Followup closes, after ``CLOSED_BY``: its watch closed (by close
#: reason), a later step's task superseded it, or activity overtook it.
CLOSE_COMMENTS: dict[Language, dict[str, str]] = {
    "de": {
        "won": "Der Deal wurde gewonnen.",
        "lost": "Der Deal wurde verloren.",
        "exhausted": "Alle Schritte sind erledigt, und seitdem gab es keinen Kontakt mehr.",
        "subject_gone": "Der Deal wurde im CRM gelöscht.",
        "out_of_scope": "Der Deal ist in keiner beobachteten Phase mehr.",
        "unwatched": "Die Nachverfolgung dieses Deals wurde von Hand beendet.",
        "superseded": "Schritt {step} von {count} ist jetzt fällig und hat eine eigene Aufgabe.",
        "contact": "Es gab Kontakt ({contact} am {day}); die Nachverfolgung beginnt von dort neu.",
    },
    "en": {
        **{reason: f"{words}." for reason, words in CLOSE_WORDS.items()},
        "superseded": "step {step} of {count} is due now and has a task of its own.",
        "contact": "the customer was contacted ({contact} on {day}); the follow-up starts again "
        "from there.",
    },
}
CLOSED_BY: dict[Language, str] = {
    "de": "Von Followup geschlossen: ",
    "en": "Closed by Followup: ",
}
#: The lines of a task, by language: labels, the instruction of each kind of step (with the
#: account's name, or without one), and why now.
WORDS: dict[Language, dict[str, str]] = {
    "de": {
        "title": "Nachfassen: {deal} — Schritt {step} von {count}",
        "what": "Aufgabe",
        "why": "Warum jetzt",
        "deal": "Deal",
        "account": "Firma",
        "stage": "Phase",
        "amount": "Betrag",
        "crm": "Im CRM",
        "summary": "Letzte E-Mails",
        "first": "Bei {who} nachfragen, ob das Angebot angekommen ist und ob es Fragen dazu gibt.",
        "first_nobody": "Beim Kunden nachfragen, ob das Angebot angekommen ist und ob es Fragen "
        "dazu gibt.",
        "middle": "Bei {who} nachfragen, wie es um die Entscheidung zum Angebot steht und was "
        "noch offen ist.",
        "middle_nobody": "Beim Kunden nachfragen, wie es um die Entscheidung zum Angebot steht "
        "und was noch offen ist.",
        "last": "Letztes geplantes Nachfassen: {who} um eine Entscheidung zum Angebot bitten.",
        "last_nobody": "Letztes geplantes Nachfassen: den Kunden um eine Entscheidung zum Angebot "
        "bitten.",
        "log": "Danach den Anruf oder die E-Mail am Deal im CRM erfassen; damit beginnt die "
        "Nachverfolgung neu.",
        "step": "Schritt {step} von {count}",
        "due_today": "heute fällig",
        "due_since": "überfällig seit {day}",
        "due_on": "fällig am {day}",
        "contact": "Letzter Kontakt {ago}: {contact} am {day}.",
        "no_contact": "Kein Kontakt erfasst, seit die Nachverfolgung am {day} begann ({ago}).",
        "today": "heute",
        "yesterday": "gestern",
        "days_ago": "vor {n} Tagen",
    },
    "en": {
        "title": "Follow up: {deal} — step {step} of {count}",
        "what": "Next step",
        "why": "Why now",
        "deal": "Deal",
        "account": "Account",
        "stage": "Stage",
        "amount": "Amount",
        "crm": "In the CRM",
        "summary": "Latest e-mails",
        "first": "Ask {who} whether the offer arrived and whether they have questions about it.",
        "first_nobody": "Ask the customer whether the offer arrived and whether they have "
        "questions about it.",
        "middle": "Ask {who} where their decision on the offer stands and what is still open.",
        "middle_nobody": "Ask the customer where their decision on the offer stands and what is "
        "still open.",
        "last": "Last planned follow-up: ask {who} for a decision on the offer.",
        "last_nobody": "Last planned follow-up: ask the customer for a decision on the offer.",
        "log": "Then log the call or e-mail on the deal in the CRM; that starts the follow-up "
        "again.",
        "step": "Step {step} of {count}",
        "due_today": "due today",
        "due_since": "overdue since {day}",
        "due_on": "due on {day}",
        "contact": "Last contact {ago}: {contact} on {day}.",
        "no_contact": "No contact recorded since the follow-up began on {day} ({ago}).",
        "today": "today",
        "yesterday": "yesterday",
        "days_ago": "{n} days ago",
    },
}
#: The longest currency code shown (ISO 4217 codes have three letters).
CURRENCY_LIMIT = 8


#: Characters that mean something inside a markdown line (emphasis, code, links, HTML, tables,
#: strike-through), escaped in text taken from the CRM; our lines never start with CRM text, so
#: the line-start markup (#, -, 1.) cannot be reached.
MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]()<>|~&])")
#: What a markdown renderer with autolinks (GFM, ClickUp) turns into a link by itself: URLs with a
#: scheme, ``www.`` hosts and e-mail addresses. Such text is shown as code, which links nothing.
AUTOLINKABLE = re.compile(
    r"(?i)(?:[a-z][a-z0-9+.-]*://|(?:mailto|xmpp):|www\.)\S+|[^\s@]+@[^\s@]+\.[^\s@]+"
)
#: Longest title ClickUp is given (it shows less); the rest is cut with an ellipsis.
TITLE_LIMIT = 250


def plain_line(text: str) -> str:
    """One line of text: control characters (newlines included) become spaces, runs of spaces
    one space."""
    cleaned = "".join(" " if unicodedata.category(ch)[0] == "C" else ch for ch in text)
    return " ".join(cleaned.split())


def markdown_text(text: str) -> str:
    """Text from the CRM as literal markdown: one line, every markup character escaped, and
    anything a renderer would turn into a link by itself shown as code."""
    line = plain_line(text)
    parts = []
    last = 0
    for match in AUTOLINKABLE.finditer(line):
        parts.append(MARKDOWN_SPECIAL.sub(r"\\\1", line[last : match.start()]))
        parts.append("`" + match.group().replace("`", "'") + "`")
        last = match.end()
    parts.append(MARKDOWN_SPECIAL.sub(r"\\\1", line[last:]))
    return "".join(parts)


def safe_link(url: str | None) -> str | None:
    """``url`` if it is an absolute http(s) URL with a host and nothing that could end the
    markdown link early; else None (no link is better than a live foreign one)."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    if any(ch in url for ch in ' ()<>"\\') or plain_line(url) != url:
        return None
    return url


@dataclass(frozen=True)
class TaskContent:
    """The text of one ClickUp task."""

    name: str
    markdown: str


@dataclass(frozen=True)
class Contact:
    """The deal's last contact as the machine knows it: what it was and its local date (for
    ``none``, the day the follow-up began)."""

    kind: ContactKind
    on: date


@dataclass(frozen=True)
class TaskFacts:
    """What a task is written from: the deal as the CRM has it now (names, stage and currency
    are CRM text, not trusted), the step, the last contact, the summary, and today's local date
    (from which "days ago" is counted)."""

    deal_name: str
    account_name: str | None
    crm_url: str | None
    stage: str
    amount: float | None
    currency: str | None
    step_no: int
    step_count: int
    due_on: date
    today: date
    contact: Contact
    summary: tuple[str, str] | None


def contact_of(kind: str | None, on: date) -> Contact:
    """The contact of a recorded activity ``kind`` (unrecorded: ``activity``) on ``on``."""
    return Contact(RECORDED_KINDS.get(kind or "", "activity"), on)


def day_text(day: date, language: Language, today: date) -> str:
    """``9 March`` / ``9. März``, with the year when it is not ``today``'s."""
    month = MONTHS[language][day.month - 1]
    text = f"{day.day}. {month}" if language == "de" else f"{day.day} {month}"
    return text if day.year == today.year else f"{text} {day.year}"


def ago_text(day: date, language: Language, today: date) -> str:
    """How long ago ``day`` was, in days: today, yesterday, ``N days ago``."""
    words = WORDS[language]
    days = (today - day).days
    if days <= 0:
        return words["today"]
    if days == 1:
        return words["yesterday"]
    return words["days_ago"].format(n=days)


def amount_text(amount: float | None, currency: str | None, language: Language) -> str:
    """``12,500.00 EUR`` / ``12.500,00 EUR``; ``—`` when the CRM has no amount."""
    if amount is None or not math.isfinite(amount):
        return "—"
    number = f"{amount:,.2f}"
    if language == "de":
        number = number.replace(",", "_").replace(".", ",").replace("_", ".")
    code = plain_line(currency or "")[:CURRENCY_LIMIT]
    return f"{number} {markdown_text(code)}" if code else number


def _instruction(facts: TaskFacts, language: Language) -> str:
    words = WORDS[language]
    if facts.step_no >= facts.step_count:
        kind = "last"
    elif facts.step_no == 1:
        kind = "first"
    else:
        kind = "middle"
    if not facts.account_name or not plain_line(facts.account_name):
        return words[f"{kind}_nobody"]
    return words[kind].format(who=markdown_text(facts.account_name))


def _why_now(facts: TaskFacts, language: Language) -> str:
    words, today = WORDS[language], facts.today
    step = words["step"].format(step=facts.step_no, count=facts.step_count)
    due = day_text(facts.due_on, language, today)
    if facts.due_on == today:
        when = words["due_today"]
    else:
        when = words["due_since" if facts.due_on < today else "due_on"].format(day=due)
    contact = facts.contact
    day, ago = day_text(contact.on, language, today), ago_text(contact.on, language, today)
    if contact.kind == "none":
        last = words["no_contact"].format(day=day, ago=ago)
    else:
        kind = CONTACT_WORDS[language][contact.kind]
        last = words["contact"].format(ago=ago, contact=kind, day=day)
    return f"{step}, {when}. {last}"


def task_name(deal_name: str, account_name: str | None) -> str:
    """The deal's name in one plain line, with its account's in parentheses unless the deal's
    name holds it already (``Crescent Analytics – Support``, not ``… (Crescent Analytics)``;
    compared without regard to case)."""
    deal, account = plain_line(deal_name), plain_line(account_name or "")
    # The same rule as the mails': legal forms aside, in whole words.
    if not account or account_shown(deal, account) is None:
        return deal
    return f"{deal} ({account})"


def render_task(facts: TaskFacts, language: Language) -> TaskContent:
    """The task of step ``facts.step_no`` of a deal, in ``language``.

    Names come from the CRM and are not trusted: the title is one plain line, the markdown
    escapes them, and the only link is the CRM's own http(s) URL.
    """
    words = WORDS[language]
    name = task_name(facts.deal_name, facts.account_name)
    if len(name) > TITLE_LIMIT:
        name = name[: TITLE_LIMIT - 1] + "…"
    title = words["title"].format(deal=name, step=facts.step_no, count=facts.step_count)
    deal = markdown_text(facts.deal_name)
    lines = [
        f"**{words['what']}:** {_instruction(facts, language)} {words['log']}",
        f"**{words['why']}:** {_why_now(facts, language)}",
        "",
        f"**{words['deal']}:** {deal}",
        f"**{words['account']}:** "
        + (markdown_text(facts.account_name) if facts.account_name else "—"),
        f"**{words['stage']}:** {markdown_text(facts.stage)}",
        f"**{words['amount']}:** {amount_text(facts.amount, facts.currency, language)}",
    ]
    link = safe_link(facts.crm_url)
    if link:
        lines.append(f"**{words['crm']}:** [{deal}]({link})")
    if facts.summary:
        lines += [
            "",
            f"**{words['summary']}:**",
            f"> {markdown_text(facts.summary[0])}",
            f"> {markdown_text(facts.summary[1])}",
        ]
    return TaskContent(name=title, markdown="\n".join(lines))


def close_comment(
    reason: str,
    language: Language,
    *,
    step: int | None = None,
    count: int | None = None,
    contact: Contact | None = None,
    today: date | None = None,
) -> str:
    """The comment left on a task that Followup closes: its watch closed (``reason`` is the
    close reason), a later step's task superseded it (``superseded``, with ``step`` of
    ``count``), or activity overtook it (``contact``, with what it was and when)."""
    words = CLOSE_COMMENTS[language]
    text = words.get(reason, reason)
    if reason == "contact" and contact is not None:
        kind = CONTACT_WORDS[language].get(contact.kind, contact.kind)
        day = day_text(contact.on, language, today or contact.on)
        text = text.format(contact=kind, day=day)
    elif reason == "superseded":
        text = text.format(step=step, count=count)
    return CLOSED_BY[language] + text


def closing(
    language: Language,
    today: date,
    *,
    superseded_by: int | None,
    step_count: int,
    contact: Contact | None,
    closed_reason: str | None,
) -> tuple[str, str]:
    """Why Followup closes a task, and the comment saying so, of the first that applies: a later
    step's task superseded it (``superseded``), activity overtook it (``contact``), its watch
    closed (the close reason)."""
    if superseded_by is not None:
        comment = close_comment("superseded", language, step=superseded_by, count=step_count)
        return "superseded", comment
    if contact is not None:
        return "contact", close_comment("contact", language, contact=contact, today=today)
    reason = closed_reason or "closed"
    return reason, close_comment(reason, language)


def assignees_for(
    crm_user_id: str | None, user_map: Mapping[str, int], default: int | None
) -> list[int]:
    """The ClickUp assignee mapped from the deal's CRM user, else the default, else nobody."""
    if crm_user_id is not None and crm_user_id in user_map:
        return [user_map[crm_user_id]]
    return [default] if default is not None else []
