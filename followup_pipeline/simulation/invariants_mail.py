"""The invariants of a simulation about mail: every report window sent once to each of its
recipients or skipped with its reason, and every alert fingerprint within its limit
(``invariants.py`` runs them)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any, LiteralString

import psycopg

from followup_pipeline.settings import Settings
from followup_pipeline.simulation.evidence import (
    Evidence,
    Invariant,
    ReportWindow,
    is_dead,
    rows,
    verdict,
)
from followup_pipeline.store.alerts import DIGEST_EVERY

#: The report jobs and the kind their keys name (``defs/report/ops.py``).
REPORT_KINDS = {"morning_report": "morning", "weekly_report": "weekly"}
#: Alerts whose fingerprint opens one alert a window (``store/alerts.py``, ``record``); the
#: others (a lag of events, a silent ``evaluate``) open one an episode, each its own source.
WINDOWED = ("run_failure", "catch_up")
#: The stamp a dead letter's alert key ends in: ``…@20260302T090000`` (UTC, to the second).
STAMP = re.compile(r"@(\d{8}T\d{6})$")
DIGEST_PREFIX = "alert:dead:digest:"

REPORT_ACTIONS: LiteralString = """
SELECT idempotency_key, outcome, reason, attempts, replayed_attempts
FROM followup.actions WHERE kind = 'report'
"""
SENT_ALERTS: LiteralString = """
SELECT id, kind, fingerprint, action_key, occurred_at
FROM followup.alerts WHERE action_key IS NOT NULL ORDER BY occurred_at, id
"""


def letters(window: ReportWindow, settings: Settings) -> list[tuple[str, list[str]]]:
    """The mails a report window owes, each its ledger key and recipients: the team's list to
    ``FOLLOWUP_REPORT_RECIPIENTS`` and, for a morning, each salesperson's own to their address."""
    kind = REPORT_KINDS[window.job]
    owed: list[tuple[str, list[str]]] = []
    if settings.report_recipients:
        owed.append((f"report:{kind}:{window.partition}", list(settings.report_recipients)))
    if kind == "morning":
        for user_id, address in sorted(settings.salesperson_addresses.items()):
            owed.append((f"report:morning:{window.partition}:to:{user_id}", [address]))
    return owed


def reports_once(
    conn: psycopg.Connection[Any],
    evidence: Evidence,
    settings: Settings,
    windows: Sequence[ReportWindow],
) -> Invariant:
    """Each mail of each window was sent once (one message in the outbox carries its key, to all
    its recipients) or skipped with its reason (suppressed, e.g. ``nothing_due``), or failed its
    attempts and waits as a dead letter with an owner; and no report's key is on two mails."""
    actions = {row["idempotency_key"]: row for row in rows(conn, REPORT_ACTIONS)}
    checked = 0
    broken: list[str] = []
    for window in windows:
        if window.job not in REPORT_KINDS:
            broken.append(f"{window.job} {window.partition}: not a report job")
            continue
        for key, recipients in letters(window, settings):
            checked += 1
            problem = _letter_problem(key, recipients, actions.get(key), evidence, settings)
            if problem is not None:
                broken.append(f"{key}: {problem}")
    owed = {key for window in windows if window.job in REPORT_KINDS
            for key, _ in letters(window, settings)}  # fmt: skip
    broken += [
        f"{key}: on {count} mails"
        for key, count in sorted(evidence.mail_keys.items())
        if key.startswith("report:") and count > 1 and key not in owed
    ]
    return verdict("reports sent once per window", checked, broken)


def _letter_problem(
    key: str,
    recipients: list[str],
    action: dict[str, Any] | None,
    evidence: Evidence,
    settings: Settings,
) -> str | None:
    """What is wrong with one owed report mail, None when it ended well."""
    mails = evidence.mails_with(key)
    if action is None:
        return f"neither sent nor skipped (no action; {len(mails)} mail(s))"
    outcome = action["outcome"]
    if outcome == "suppressed":
        if not action["reason"]:
            return "skipped without a reason"
        return None if not mails else f"skipped ({action['reason']}) but on {len(mails)} mail(s)"
    if len(mails) > 1:
        return f"{outcome}, and {len(mails)} mails carry its key"
    if outcome in ("accepted", "confirmed"):
        if len(mails) != 1:
            return f"{outcome}, and {len(mails)} mails carry its key"
        missing = sorted({r.strip().lower() for r in recipients} - mails[0].to)
        return f"its mail did not go to {', '.join(missing)}" if missing else None
    if is_dead(action, settings.action_max_attempts):
        return None if settings.ops_owner else "a dead letter with no owner (FOLLOWUP_OPS_OWNER)"
    return f"neither sent nor skipped ({outcome}, {action['attempts']} attempt(s))"


def alerts_within_limits(
    conn: psycopg.Connection[Any], evidence: Evidence, settings: Settings
) -> Invariant:
    """No alert went out more often than its limit allows (``store/alerts.py``):

    - a run failure's or a catch-up item's fingerprint: one alert a window
      (``FOLLOWUP_ALERT_WINDOW_H``); two of one fingerprint are more than a window apart;
    - dead letters: at most ``FOLLOWUP_ALERT_DEAD_LETTERS_PER_WINDOW`` alerts of their own
      within any window, and a digest of the held ones only when no dead-letter alert went out
      within the hour (or the window, if shorter) before it;
    - every alert key names one row, but a digest's (which names the dead letters it holds);
    - and no alert's key is on two mails.
    """
    sent = rows(conn, SENT_ALERTS)
    window = settings.alert_window()
    broken: list[str] = []
    keys: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in sent:
        keys[row["action_key"]].append(row)
    broken += [
        f"{key}: one alert for {len(named)} rows"
        for key, named in keys.items()
        if len(named) > 1 and not key.startswith(DIGEST_PREFIX)
    ]
    opened: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in sent:
        if row["kind"] in WINDOWED:
            opened[row["fingerprint"]].append(row)
    for fingerprint, alerts in opened.items():
        for earlier, later in pairwise(alerts):
            gap = later["occurred_at"] - earlier["occurred_at"]
            if gap <= window:
                broken.append(
                    f"{fingerprint}: {earlier['action_key']} and {later['action_key']} went out "
                    f"{gap} apart, within one window of {window}"
                )
    broken += _dead_letter_problems(keys, settings, window)
    broken += [
        f"{key}: on {evidence.mail_count(key)} mails"
        for key in keys
        if evidence.mail_count(key) > 1
    ]
    return verdict("alerts within their limits", len(keys), broken)


def _stamp(key: str) -> datetime | None:
    found = STAMP.search(key)
    return datetime.strptime(found[1], "%Y%m%dT%H%M%S").replace(tzinfo=UTC) if found else None


def _dead_letter_problems(
    keys: dict[str, list[dict[str, Any]]], settings: Settings, window: timedelta
) -> list[str]:
    """The dead-letter alerts beyond their limit per window, and digests sent too soon."""
    stamped = [
        (stamp, key)
        for key, named in keys.items()
        if named[0]["kind"] == "dead_letter" and (stamp := _stamp(key)) is not None
    ]
    singles = sorted((s, k) for s, k in stamped if not k.startswith(DIGEST_PREFIX))
    limit = settings.alert_dead_letters_per_window
    problems: list[str] = []
    for stamp, key in singles:
        within = [k for s, k in singles if stamp - window <= s <= stamp]
        if len(within) > limit:
            problems.append(
                f"{key}: {len(within)} dead-letter alerts of their own within {window} "
                f"up to {stamp:%Y-%m-%d %H:%M:%S} UTC (limit {limit})"
            )
    every = min(window, DIGEST_EVERY)
    for stamp, key in sorted(stamped):
        if not key.startswith(DIGEST_PREFIX):
            continue
        soon = [k for s, k in stamped if k != key and stamp - every < s <= stamp]
        if soon:
            problems.append(f"{key}: a digest within {every} of {', '.join(sorted(soon))}")
    return problems
