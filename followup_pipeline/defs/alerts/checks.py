"""What the ``alert_checks`` sensor looks for, besides failed runs: new dead letters, an event
pending too long, and business hours without a successful ``evaluate``."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.settings import Settings
from followup_pipeline.store import lms_queue
from followup_pipeline.store.alerts import PendingEvent, Signal
from followup_pipeline.store.dead_letters import dead_letters


def _minutes(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


#: The learning reminders' own actions: their dead letters go to the catch-up queue.
LEARNING_ACTION = re.compile(r"^action:(lms:(?!weekly:)|lms-cert:|lms-publish:)")
#: How long a learning action's dead letter waits for its run to queue it (every 15 minutes)
#: before it is alerted as a dead letter after all (its tenant off, its course dropped).
QUEUE_GRACE = timedelta(hours=1)


def dead_letter_signals(
    conn: psycopg.Connection[Any], settings: Settings, *, now: datetime | None = None
) -> list[Signal]:
    """Every dead letter, one signal each, named by its ``event:``/``action:`` name. An alert's
    own ledger action is left out: alerting never alerts about itself; so is a learning
    action's, which the catch-up queue alerts with its owner (``catch_up_signals``), unless no
    run queued it within an hour."""
    found = []
    queued = {f"action:{key}" for key in lms_queue.open_action_keys(conn)}
    for letter in dead_letters(conn, max_attempts=settings.action_max_attempts):
        if letter.name.startswith("action:alert:") or letter.name in queued:
            continue
        waits = now is None or now - letter.since < QUEUE_GRACE
        if LEARNING_ACTION.match(letter.name) and waits:
            continue
        step = f" at step {letter.step}" if letter.step else ""
        found.append(
            Signal(
                kind="dead_letter",
                # A second death after a replay is a new dead letter; so is each invalid item.
                source=f"{letter.name}|{letter.step or ''}|{letter.since.isoformat()}",
                fingerprint=f"dead:{letter.name}",
                subject=letter.name,
                message=(
                    f"{letter.what}{step}, {letter.attempts} attempts: "
                    f"{letter.error or 'no error recorded'}"
                ),
                occurred_at=letter.since,
            )
        )
    return found


def pending_signal(
    oldest: PendingEvent | None, *, now: datetime, settings: Settings, episode: str | None
) -> Signal | None:
    """The oldest pending event, when it waited longer than the threshold: one signal per
    episode of lag (``episode``: when the current one began, if one is going on), so a lag that
    lasts an hour is one alert, and a lag after the events caught up is a new one."""
    if oldest is None:
        return None
    age = now - oldest.received_at
    if age < timedelta(minutes=settings.alert_pending_after_min):
        return None
    try:
        began = datetime.fromisoformat(episode) if episode else now
    except ValueError:
        began = now
    what = f"{oldest.source} {oldest.event_type or ''}".strip()
    error = f"; last error: {oldest.last_error}" if oldest.last_error else ""
    return Signal(
        kind="pending_events",
        source=f"pending:{began.isoformat()}",
        fingerprint="pending_events",
        subject="register",
        message=(
            f"event:{oldest.id} ({what}) pending for {_minutes(age)}, "
            f"{oldest.attempts} attempts{error}"
        ),
        occurred_at=began,
    )


def stale_signal(
    last_success: datetime | None,
    *,
    now: datetime,
    watching_since: datetime,
    settings: Settings,
    calendar: BusinessCalendar,
) -> Signal | None:
    """Within ``evaluate``'s hours of a business day (all of it by default): no successful
    ``evaluate`` for longer than the threshold, counted from the latest of its last success, the
    window's first hour, and when the checks began on this machine (a machine started at 10:30
    is not silent since 07:00).
    One signal per silence (a run that succeeds ends it)."""
    zone = ZoneInfo(settings.timezone)
    local = now.astimezone(zone)
    if not calendar.is_business_day(local.date()):
        return None
    opens = local.replace(hour=settings.evaluate_hours_start, minute=0, second=0, microsecond=0)
    if settings.evaluate_hours_end >= 24:
        closes = opens.replace(hour=0) + timedelta(days=1)
    else:
        closes = opens.replace(hour=settings.evaluate_hours_end)
    if not opens <= local < closes:
        return None
    since = max(t for t in (last_success, opens, watching_since) if t is not None)
    silence = now - since
    if silence < timedelta(hours=settings.alert_evaluate_silence_h):
        return None
    last = (
        f"its last success was at {last_success.astimezone(zone):%Y-%m-%d %H:%M %Z}"
        if last_success is not None
        else "it never succeeded on this machine"
    )
    return Signal(
        kind="stale_evaluate",
        source=f"stale:evaluate:{since.astimezone(zone):%Y-%m-%dT%H:%M:%S%z}",
        fingerprint="stale_evaluate",
        subject="evaluate",
        message=f"no successful run for {_minutes(silence)} of business hours; {last}",
        occurred_at=now,
    )


def catch_up_signals(conn: psycopg.Connection[Any]) -> list[Signal]:
    """Every open item of the learning reminders' catch-up queue, one signal each, to the
    operations list and the item's owner and backup. One fingerprint per tenant and kind: a
    bulk of them (every learner of a course without an address) is one mail a window, the
    rest counted in the next (``followup lms queue`` lists them all)."""
    return [
        Signal(
            kind="catch_up",
            source=f"queue:{item.id}",
            fingerprint=f"queue:{item.tenant_id}:{item.kind}",
            subject=f"{item.tenant_id}: {item.what}",
            message=(
                f"{item.reason}. Owner: {item.owner}"
                + (f", backup: {item.backup}" if item.backup else "")
                + f". Key {item.action_key}. All that waits: followup lms queue --tenant "
                + f"{item.tenant_id}."
            ),
            occurred_at=item.queued_at,
            also_to=tuple(a for a in (item.owner, item.backup) if a and "@" in a),
        )
        for item in lms_queue.items(conn, closed_since=None)
    ]
