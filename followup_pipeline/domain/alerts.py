"""What makes two failures the same alert: a fingerprint of the job, the error's type and its
message with numbers and ids normalised; the ledger keys of alerts; the alert mail. Pure code."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from followup_pipeline.domain.reports import environment
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
AlertKind = Literal[
    "run_failure",
    "dead_letter",
    "pending_events",
    "stale_evaluate",
    "catch_up",
    "degraded",
    "recovered",
    "watchdog",
    "healed",
    "census",
]
_PREFIX: dict[AlertKind, str] = {
    "census": "census",
    "watchdog": "watchdog",
    "healed": "healed",
    "catch_up": "queue",
    "degraded": "degraded",
    "recovered": "recovered",
    "run_failure": "run",
    "dead_letter": "dead",
    "pending_events": "pending",
    "stale_evaluate": "evaluate",
}
#: Dead letters a digest names at most (with their step and error); it counts the rest.
MAX_NAMES_PER_MAIL = 50
#: How the key of a dead-letter digest begins (a single dead letter's: ``alert:dead:event:``
#: or ``alert:dead:action:``).
DIGEST_PREFIX = "alert:dead:digest:"


def key_stamp(at: datetime) -> str:
    """A moment as the keys of alerts end in it (UTC, to the second): fixed width, so two
    stamps compare as text as the moments do."""
    return f"{at.astimezone(UTC):%Y%m%dT%H%M%S}"


def alert_key(kind: AlertKind, fingerprint_text: str, opened_at: datetime) -> str:
    """The ledger key of an alert that opens a window of its fingerprint at ``opened_at``: the
    fingerprint's hash and the window's start, so a re-evaluation or a rerun finds it sent."""
    digest = hashlib.sha256(fingerprint_text.encode()).hexdigest()[:16]
    return f"alert:{_PREFIX[kind]}:{digest}:{key_stamp(opened_at)}"


def dead_letter_key(names: Sequence[str], at: datetime) -> str:
    """The ledger key of the alert of one dead letter (``[name]``) that went out at ``at``: its
    name and when (a dead letter that dies again after a replay is news). Alerts from before
    the digests named several (``alert:dead:event:7+9@…``: the first, how many more)."""
    more = f"+{len(names) - 1}" if len(names) > 1 else ""
    return f"alert:dead:{names[0]}{more}@{key_stamp(at)}"


def dead_letter_digest_key(names: Sequence[str], at: datetime) -> str:
    """The ledger key of the digest of the held dead letters ``names`` that went out at ``at``:
    the first name, how many more, and when, so a second look at the same tick finds it."""
    return DIGEST_PREFIX + dead_letter_key(names, at).removeprefix("alert:dead:")


def is_dead_letter_digest(key: str) -> bool:
    """Whether ``key`` is the key of a dead-letter digest."""
    return key.startswith(DIGEST_PREFIX)


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
    if item.kind == "catch_up":
        return [
            "An action that can be neither done nor suppressed now (its vendor away, no "
            "address, not approved) waits for its owner: `followup work list` lists it with why.",
            "It closes by itself once the action is done or settled.",
        ]
    if item.kind == "watchdog":
        return [
            "The watchdog, a process outside Dagster, found this part of the machine's "
            "scheduling stalled. A dead daemon runs nothing by itself until it is started "
            "again (`make run`; in production the unit followup-daemon.service or the compose "
            "service `daemon`); `followup doctor` says what is stopped.",
            "A restarted daemon runs a schedule's latest missed tick; older ones are not made "
            'up (run them from the UI). A "healed" alert says when it runs again.',
        ]
    if item.kind == "census":
        return [
            "Every run is green, yet a watched stage has gone quiet: compare the stage in the CRM "
            "with FOLLOWUP_WATCHED_STAGES, and the API user's read rights on its deals.",
            "`followup doctor` shows the census of each watched stage over the last weeks.",
        ]
    if item.kind == "healed":
        return [f"Nothing to do: it runs again. Its runs: {ui_url}/runs"]
    if item.kind == "degraded":
        return [
            f"The job's runs end green but partial: open them: {ui_url}/runs (the tag "
            "followup/degraded says what each skipped and why).",
            "`followup doctor` checks every vendor; what waits is done by the first clean run "
            '(a "recovered" alert says so).',
        ]
    if item.kind == "recovered":
        return [f"Nothing to do: the job's latest run ended clean. Its runs: {ui_url}/runs"]
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
    digest: bool = False,
) -> AlertMail:
    """The mail about ``items`` (one alert: one failure, one silence, one dead letter), with how
    many repeats were held back since its fingerprint's last one; with ``digest``, the mail
    about the dead letters held back beyond the limit of a window (``render_digest``).

    What it quotes (error messages, names) is outside text: escaped in the HTML (its template,
    ``templates/alert.html.j2``), and literal in the Markdown (``markdown_text``: no markup, no
    link)."""
    if digest:
        return render_digest(items, zone=zone)
    first = items[0]
    local = ZoneInfo(zone)
    names = [i.subject for i in items]
    if first.kind == "dead_letter":
        # Several: an alert from before the digests (dead letters found in one tick).
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
    return _mail(subject, body)


def render_digest(items: Sequence[AlertItem], *, zone: str) -> AlertMail:
    """The digest of ``items``, dead letters held back because the window's alerts of their own
    were used up: how many, the first ``MAX_NAMES_PER_MAIL`` by name with their step and error
    (one line each), how many more, and where the whole list is."""
    local = ZoneInfo(zone)
    count = len(items)
    names = [i.subject for i in items]
    shown = items[:MAX_NAMES_PER_MAIL]
    more = count - len(shown)
    plural = "dead letter" if count == 1 else "dead letters"
    subject = f"{count} {plural} held back: {names[0]}"
    if count > 1:
        subject += f" and {count - 1} more"
    subject = " ".join(subject.split())
    first = f"{min(i.occurred_at for i in items).astimezone(local):%Y-%m-%d %H:%M %Z}"
    last = f"{max(i.occurred_at for i in items).astimezone(local):%Y-%m-%d %H:%M %Z}"
    died = f"at {first}" if first == last else f"between {first} and {last}"
    body: list[tuple[bool, str]] = [
        (True, f"Followup alert: {subject}"),
        (False, ""),
        (
            False,
            f"{count} {plural} (died {died}) came after the dead-letter alerts of their own "
            "that one alert window allows (FOLLOWUP_ALERT_DEAD_LETTERS_PER_WINDOW); they were "
            "held back and are counted together here.",
        ),
        (False, ""),
    ]
    for item in shown:
        when = item.occurred_at.astimezone(local)
        line = " ".join((item.message.strip().splitlines() or [""])[0].split())
        body.append((True, f"{item.subject} at {when:%Y-%m-%d %H:%M %Z}: {cut_at_word(line, 200)}"))
    if more:
        body.append((False, f"and {more} more: followup dead-letters list has them all."))
    replay = " ".join(i.subject for i in shown)
    body += [
        (False, ""),
        (False, "What to do:"),
        (False, "- Every dead letter, with its step and last error: followup dead-letters list"),
        (False, f"- See what failed: followup dead-letters show {names[0]}"),
        (
            False,
            f"- After fixing the cause, replay: followup dead-letters replay {replay}"
            + (f" (and the {more} more of the list)" if more else ""),
        ),
        (False, "- Every alert and what was held back: followup alerts list"),
    ]
    return _mail(subject, body)


def _mail(subject: str, body: Sequence[tuple[bool, str]]) -> AlertMail:
    """The mail of ``subject`` and ``body`` lines (quoted: outside text, made literal)."""
    html = environment().get_template("alert.html.j2").render(lines=[text for _, text in body])
    markdown = "\n".join(_markdown(text) if quoted else text for quoted, text in body)
    return AlertMail(subject=f"[followup] {subject}", html=html, markdown=markdown + "\n")


def _markdown(text: str) -> str:
    """A quoted line as literal Markdown; an indented line (a message) as a block quote."""
    return f"> {markdown_text(text)}" if text.startswith("    ") else markdown_text(text)


def self_alert_key(detail: str, at: datetime, window: timedelta) -> str:
    """The ledger key of the ClickUp task about a failed ``alert`` run: one per kind of failure
    (its message, normalised) and window, so retries every 15 minutes do not fill the list."""
    digest = hashlib.sha256(normalised(detail).encode()).hexdigest()[:16]
    seconds = int(window.total_seconds())
    start = datetime.fromtimestamp(int(at.timestamp()) // seconds * seconds, tz=UTC)
    return f"alert:self:{digest}:{key_stamp(start)}"
