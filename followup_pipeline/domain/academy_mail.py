"""What an academy's people read (docs/architecture.md §10), from templates in their language and
time zone: a learner's reminder by e-mail and as a Moodle message, the academy owner's mail of
what waits for them (each item with a signed link where a click is safe), the academy's weekly
mail, and the page a signed link opens. Pure code: the words are ``academy_words.py``'s, the
templates ``templates/academy_*.j2`` (HTML autoescaped)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from followup_pipeline.domain.academy_words import WORDS, Language, day_text, moment_text
from followup_pipeline.domain.reports import environment

#: The longest Moodle message Moodle's instant messages take (bytes).
MOODLE_MAX_BYTES = 4096


@dataclass(frozen=True)
class Rendered:
    """A mail as sent: its subject, its HTML and its plain text."""

    subject: str
    html: str
    text: str


@dataclass(frozen=True)
class LearnerReminder:
    """One reminder as its learner reads it."""

    academy: str
    language: Language
    #: The learner's zone (else the academy's): every time is given in it.
    zone: str
    learner: str | None
    quiz: str
    quiz_url: str
    due_at: datetime | None
    #: ``before_due``, ``due_day`` or ``overdue``.
    action_type: str
    opt_out_url: str


def _reminder_words(reminder: LearnerReminder) -> dict[str, str]:
    w = WORDS[reminder.language]
    kind = reminder.action_type if reminder.action_type in ("before_due", "due_day") else "overdue"
    due = moment_text(reminder.due_at, reminder.zone, reminder.language) if reminder.due_at else ""
    due_day = day_text(reminder.due_at, reminder.zone, reminder.language) if reminder.due_at else ""
    values = {"quiz": reminder.quiz, "academy": reminder.academy, "due": due, "due_day": due_day}
    lead = w[f"lead_{kind}"] if reminder.due_at else w["lead_no_due"]
    # Without a due date there is no day to name: the reminder says the quiz is open.
    subject_kind = kind if reminder.due_at is not None or kind != "before_due" else "overdue"
    return {
        "subject": " ".join(w[f"subject_{subject_kind}"].format(**values).split()),
        "hello": w["hello"].format(name=reminder.learner) if reminder.learner else w["hello_anon"],
        "lead": lead.format(**values),
        "miss": w["miss_overdue"] if kind == "overdue" else w["miss_open"],
        "open_quiz": w["open_quiz"],
        "closing": w["closing"].format(academy=reminder.academy),
        "why": w["why"].format(academy=reminder.academy),
        "opt_out": w["opt_out"],
    }


def render_reminder(reminder: LearnerReminder) -> Rendered:
    """The reminder as an e-mail."""
    words = _reminder_words(reminder)
    context = {"r": reminder, "w": words, "lang": reminder.language}
    templates = environment()
    html = templates.get_template("academy_reminder.html.j2").render(**context)
    text = templates.get_template("academy_reminder.txt.j2").render(**context)
    return Rendered(words["subject"], html, text)


def render_moodle_message(reminder: LearnerReminder) -> str:
    """The reminder as a Moodle message: short, plain, its links written out."""
    words = _reminder_words(reminder)
    w = WORDS[reminder.language]
    body = w["moodle_short"].format(
        lead=words["lead"][:1].upper() + words["lead"][1:],
        miss=words["miss"],
        quiz_url=reminder.quiz_url,
        opt_out_url=reminder.opt_out_url,
    )
    text = f"{words['subject']}\n\n{body}\n\n{reminder.academy}"
    if len(text.encode()) > MOODLE_MAX_BYTES and len(reminder.quiz) > 80:
        # A quiz name of thousands of characters is cut, never the links or the academy.
        shorter = replace(reminder, quiz=reminder.quiz[:77] + "…")
        return render_moodle_message(shorter)
    return text


@dataclass(frozen=True)
class OwnerLine:
    """One thing that waits for an academy's owner: why, since when, and what they can do."""

    why: str
    since: datetime
    approve_url: str | None = None
    acknowledge_url: str | None = None
    #: What it is, in a few words (the mail's subject names the first).
    label: str = ""


def why_text(language: Language, kind: str, **values: str) -> str:
    """Why an item waits, in the owner's words (``why_reminder``, ``why_publication``, …)."""
    template = WORDS[language].get(f"why_{kind}", WORDS[language]["why_other"])
    try:
        return template.format(**values)
    except KeyError:
        return WORDS[language]["why_other"].format(what=values.get("what", kind))


def render_owner(
    *,
    academy: str,
    language: Language,
    zone: str,
    lines: Sequence[OwnerLine],
    ops: str | None,
    links_until: datetime | None,
) -> Rendered:
    """The academy owner's mail of what waits for them (times in the academy's zone)."""
    w = WORDS[language]
    n = len(lines)
    what = (lines[0].label if lines else "") or w["why_label_other"]
    chosen = w["owner_subject_1"] if n == 1 else w["owner_subject_n"]
    subject = " ".join(chosen.format(academy=academy, what=what, more=n - 1).split())
    when = {id(line): moment_text(line.since, zone, language) for line in lines}
    context = {
        "w": w,
        "lang": language,
        "academy": academy,
        "lines": [(line, w["owner_when"].format(when=when[id(line)])) for line in lines],
        "lead": w["owner_lead"].format(academy=academy),
        "ask": w["owner_ask"].format(ops=ops) if ops else w["owner_ask_anon"],
        "link_note": (
            w["owner_link_note"].format(until=moment_text(links_until, zone, language))
            if links_until is not None and any(x.approve_url or x.acknowledge_url for x in lines)
            else ""
        ),
        "footer": w["owner_footer"].format(academy=academy),
    }
    templates = environment()
    html = templates.get_template("academy_owner.html.j2").render(**context)
    text = templates.get_template("academy_owner.txt.j2").render(**context)
    return Rendered(subject, html, text)


@dataclass(frozen=True)
class WeekCounts:
    """A tenant's reminders by outcome over the week, as its weekly mail shows them."""

    overdue: int
    failures: int
    superseded: int
    opted_out: int
    completed: int
    expired: int
    sent: int
    confirmed: int
    planned: int
    queued: int


def render_weekly(
    *,
    academy: str,
    language: Language,
    zone: str,
    week: str,
    dry: bool,
    counts: WeekCounts,
    until: datetime,
) -> Rendered:
    """The academy's week of reminders, for its owner."""
    w = WORDS[language]
    names = ("overdue", "failures", "superseded", "opted_out", "completed", "expired", "sent",
             "confirmed", "planned", "queued")  # fmt: skip
    rows = [(w[f"weekly_{name}"], getattr(counts, name)) for name in names]
    values = {"academy": academy, "week": week, "sent": counts.sent, "overdue": counts.overdue}
    context = {
        "lang": language,
        "title": w["weekly_title"].format(**values),
        "rows": rows,
        "dry": w["weekly_mode_dry"] if dry else "",
        "zone": w["weekly_zone"].format(until=moment_text(until, zone, language)),
    }
    templates = environment()
    html = templates.get_template("academy_weekly.html.j2").render(**context)
    text = templates.get_template("academy_weekly.txt.j2").render(**context)
    return Rendered(w["weekly_subject"].format(**values), html, text)


def render_link_page(
    *, language: Language, message: str, ask: str = "", button: str = "", action: str = ""
) -> str:
    """The page a signed link opens: a question and a button that posts (``action``), or what
    a post did."""
    context = {"lang": language, "message": message, "ask": ask, "button": button,
               "action": action}  # fmt: skip
    return environment().get_template("academy_link.html.j2").render(**context)
