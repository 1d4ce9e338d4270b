"""What makes two failures the same alert: a fingerprint of the job, the error's type and its
message with numbers and ids normalised; the ledger keys of alerts; the alert mail. Pure code."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Literal
from zoneinfo import ZoneInfo

from followup_pipeline.domain.tasks import markdown_text
from followup_pipeline.domain.text import cut_at_word

#: Parts of a message that differ between repeats of one failure.
VOLATILE = (
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (re.compile(r"\b[0-9a-f]{12,}\b", re.I), "<id>"),
    (
        re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([+-]\d{2}:?\d{2}|Z)?"),
        "<time>",
    ),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)
MAX_MESSAGE = 200


def normalised(message: str) -> str:
    """The first line of ``message`` with ids, times and numbers replaced, spaces collapsed."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    for pattern, placeholder in VOLATILE:
        first = pattern.sub(placeholder, first)
    return " ".join(first.split())[:MAX_MESSAGE]


def fingerprint(job: str, error_type: str, message: str) -> str:
    """The same for repeats of one failure, different for different failures."""
    return f"{job}|{error_type}|{normalised(message)}"


#: What raised an alert.
AlertKind = Literal["run_failure", "dead_letter", "pending_events", "stale_evaluate"]
_PREFIX: dict[AlertKind, str] = {
    "run_failure": "run",
    "dead_letter": "dead",
    "pending_events": "pending",
    "stale_evaluate": "evaluate",
}
#: Dead letters named in one alert mail at most; more go in further mails of the same tick.
MAX_NAMES_PER_MAIL = 50


def _stamp(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y%m%dT%H%M%S}"


def alert_key(kind: AlertKind, fingerprint_text: str, opened_at: datetime) -> str:
    """The ledger key of an alert that opens a window of its fingerprint at ``opened_at``: the
    fingerprint's hash and the window's start, so a re-evaluation or a rerun finds it sent."""
    digest = hashlib.sha256(fingerprint_text.encode()).hexdigest()[:16]
    return f"alert:{_PREFIX[kind]}:{digest}:{_stamp(opened_at)}"


def dead_letter_key(names: Sequence[str], at: datetime) -> str:
    """The ledger key of one mail about ``names`` (dead letters found together at ``at``): the
    first name, how many more, and when (a dead letter that dies again after a replay is news)."""
    more = f"+{len(names) - 1}" if len(names) > 1 else ""
    return f"alert:dead:{names[0]}{more}@{_stamp(at)}"


@dataclass(frozen=True)
class AlertItem:
    """One thing an alert is about (a row of ``alerts``)."""

    kind: AlertKind
    subject: str
    message: str
    occurred_at: datetime
    run_id: str | None = None


@dataclass(frozen=True)
class AlertMail:
    """An alert as sent: a subject, the mail's HTML, and the same text as Markdown (ClickUp)."""

    subject: str
    html: str
    markdown: str


def _what_to_do(item: AlertItem, names: Sequence[str], ui_url: str) -> list[str]:
    if item.kind == "run_failure":
        return [
            f"Open the run: {ui_url}/runs/{item.run_id}",
            "Once the cause is fixed, re-execute it there (Re-execute > From failure), or "
            "backfill its partition; `followup doctor` checks every vendor.",
        ]
    if item.kind == "dead_letter":
        joined = " ".join(names)
        return [
            f"See what failed: followup dead-letters show {names[0]}",
            f"After fixing the cause, replay: followup dead-letters replay {joined}",
        ]
    if item.kind == "pending_events":
        return [
            "The crm_events sensor or the register runs are not keeping up or not running:",
            f"`followup doctor`, the sensor in the UI: {ui_url}/automation, the register runs: "
            f"{ui_url}/runs",
        ]
    return [
        "Is the schedule evaluate_business_hours running, and the daemon? `followup doctor`.",
        "Run one now: followup dagster job execute -j evaluate",
    ]


def render_alert(
    items: Sequence[AlertItem],
    *,
    held: int,
    held_since: datetime | None,
    ui_url: str,
    zone: str,
) -> AlertMail:
    """The mail about ``items`` (one alert: one failure, one silence, or the dead letters found
    in one sensor tick), with how many repeats were held back since its fingerprint's last one.

    What it quotes (error messages, names) is outside text: escaped in the HTML, and literal in
    the Markdown (``markdown_text``: no markup, no link)."""
    first = items[0]
    local = ZoneInfo(zone)
    names = [i.subject for i in items]
    if first.kind == "dead_letter":
        subject = (
            f"{names[0]}: dead letter"
            if len(items) == 1
            else f"{names[0]} and {len(items) - 1} more: dead letters"
        )
    else:
        lines = first.message.strip().splitlines() or ["failed"]
        subject = f"{first.subject}: {cut_at_word(' '.join(lines[0].split()), 120)}"
    if held:
        subject += f" ({held} repeats held back)"
    subject = " ".join(subject.split())
    # (quoted, text): quoted lines come from outside and are made literal for Markdown.
    body: list[tuple[bool, str]] = [(True, f"Followup alert: {subject}"), (False, "")]
    for item in items:
        when = item.occurred_at.astimezone(local)
        body.append((True, f"{item.subject} at {when:%Y-%m-%d %H:%M %Z}:"))
        body += [(True, f"    {line}") for line in item.message.strip().splitlines()[:20]]
    if held:
        since = f" since {held_since.astimezone(local):%Y-%m-%d %H:%M %Z}" if held_since else ""
        body += [
            (False, ""),
            (False, f"{held} repeats of this failure{since} were held back (not mailed)."),
        ]
    body += [(False, ""), (False, "What to do:")]
    body += [(False, f"- {line}") for line in _what_to_do(first, names, ui_url.rstrip("/"))]
    body += [(False, "- Every alert and what was held back: followup alerts list")]
    html = "".join(f"{escape(text)}<br>\n" if text else "<br>\n" for _, text in body)
    markdown = "\n".join(_markdown(text) if quoted else text for quoted, text in body)
    return AlertMail(
        subject=f"[followup] {subject}",
        html=f'<div style="font-family: monospace">\n{html}</div>\n',
        markdown=markdown + "\n",
    )


def _markdown(text: str) -> str:
    """A quoted line as literal Markdown; an indented line (a message) as a block quote."""
    return f"> {markdown_text(text)}" if text.startswith("    ") else markdown_text(text)


def self_alert_key(detail: str, at: datetime, window: timedelta) -> str:
    """The ledger key of the ClickUp task about a failed ``alert`` run: one per kind of failure
    (its message, normalised) and window, so retries every 15 minutes do not fill the list."""
    digest = hashlib.sha256(normalised(detail).encode()).hexdigest()[:16]
    seconds = int(window.total_seconds())
    start = datetime.fromtimestamp(int(at.timestamp()) // seconds * seconds, tz=UTC)
    return f"alert:self:{digest}:{_stamp(start)}"
