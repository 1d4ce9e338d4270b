"""What the ``alert_checks`` sensor looks for, besides failed runs: new items of the list of work
waiting for a person, an event pending too long, business hours without a successful
``evaluate``, and a watched stage gone quiet (the census)."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from followup_pipeline.domain.calendar import BusinessCalendar
from followup_pipeline.domain.census import Count, quiet_now
from followup_pipeline.domain.work import CATCH_UP_KINDS
from followup_pipeline.settings import Settings
from followup_pipeline.store.alerts import PendingEvent, Signal
from followup_pipeline.store.work import WorkItem


def _minutes(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def work_signals(items: list[WorkItem]) -> tuple[list[Signal], list[Signal]]:
    """One signal for each failure of an open item of the list not alerted yet: dead letters
    (dead events, dead actions, invalid items), and apart the late ones (the learning
    reminders' items, a deal's step whose vendor stays away). Each goes to the operations list
    and to the item's owner and backup; a failure after a replay is a new signal. A late item's
    fingerprint is its tenant's (or its pipeline's) and kind's: a bulk of them (every learner of
    a course without an address, every deal due while the CRM is down) is one mail a window,
    the rest counted in the next (``followup work list`` has them all)."""
    dead: list[Signal] = []
    catch_up: list[Signal] = []
    for item in items:
        also = tuple(a for a in (item.owner, item.backup) if a and "@" in a)
        owners = f"Owner: {item.owner}" + (f", backup: {item.backup}" if item.backup else "")
        again = f" (failed again after {item.replays} replay(s))" if item.failures > 1 else ""
        if item.kind in CATCH_UP_KINDS:
            # The academy's owner gets a mail of their own, in their words (``owner_mail.py``).
            catch_up.append(
                Signal(
                    kind="catch_up",
                    source=f"work:{item.id}:{item.failures}",
                    fingerprint=f"queue:{item.tenant_id}:{item.kind}",
                    subject=f"{item.tenant_id}: {item.what}",
                    message=(
                        f"{item.reason}{again}. {owners}. Key {item.action_key}. "
                        f"See it: followup work show {item.id}; all that waits: "
                        f"followup lms queue --tenant {item.tenant_id}."
                    ),
                    occurred_at=item.failed_at,
                )
            )
            continue
        if item.kind == "step":  # late, its vendor away: one mail a window for all of them
            catch_up.append(
                Signal(
                    kind="catch_up",
                    source=f"work:{item.id}:{item.failures}",
                    fingerprint="queue:deal_followup:step",
                    subject=f"late follow-up: {item.what}",
                    message=(
                        f"{item.reason}. {owners}. Key {item.action_key}. "
                        f"See it: followup work show {item.id}; all that waits: "
                        "followup work list --pipeline deal_followup --kind step."
                    ),
                    occurred_at=item.failed_at,
                    also_to=also,
                )
            )
            continue
        step = f" at step {item.step}" if item.step else ""
        dead.append(
            Signal(
                kind="dead_letter",
                source=f"work:{item.id}:{item.failures}",
                fingerprint=f"dead:{item.subject}",
                subject=item.subject,
                message=(
                    f"{item.what}{step}, {item.reason}{again}: "
                    f"{item.error or 'no error recorded'}. {owners}. "
                    f"See it: followup work show {item.id}."
                ),
                occurred_at=item.failed_at,
                also_to=also,
            )
        )
    return dead, catch_up


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
        f"its last clean run ended at {last_success.astimezone(zone):%Y-%m-%d %H:%M %Z}"
        if last_success is not None
        else "it never ended clean on this machine"
    )
    return Signal(
        kind="stale_evaluate",
        source=f"stale:evaluate:{since.astimezone(zone):%Y-%m-%dT%H:%M:%S%z}",
        fingerprint="stale_evaluate",
        subject="evaluate",
        message=f"no clean run for {_minutes(silence)} of business hours; {last}",
        occurred_at=now,
    )


def census_signals(
    counts: list[Count], *, now: datetime, settings: Settings, calendar: BusinessCalendar
) -> list[Signal]:
    """A signal for each watched stage gone quiet (``domain/census.py``), one per quiet spell
    (its source names the day it began)."""
    found = quiet_now(
        counts,
        settings.watched_stages,
        calendar=calendar,
        today=now.astimezone(ZoneInfo(settings.timezone)).date(),
        days=settings.census_quiet_days,
    )
    return [
        Signal(
            kind="census",
            source=f"census:{quiet.stage}:{quiet.rule}:{quiet.since:%Y-%m-%d}",
            fingerprint=f"census:{quiet.stage}",
            subject=f"watched stage {quiet.stage}",
            message=quiet.message,
            occurred_at=now,
        )
        for quiet in found
    ]
