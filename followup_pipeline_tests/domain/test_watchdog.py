"""What the watchdog finds stalled, as pure logic: a daemon without heartbeats (one cause that
names what it stalls), a skipped ``morning_report`` tick read from its cron as Dagster reads it
(time zone and DST included), a sensor left behind, and what begins and what heals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from followup_pipeline.commands.watchdog import last_due
from followup_pipeline.domain.watchdog import (
    DAEMONS,
    Evaluation,
    Tick,
    causes,
    decide,
    late_evaluation,
    missed_tick,
    stale_daemons,
    watchdog_silent,
)

ZONE = "Europe/Berlin"
#: morning_report_weekdays: 07:30 on weekdays in the team's zone.
MORNING = "30 7 * * 1-5"
#: Monday 30 March 2026, 07:40 in Berlin (summer time since Sunday).
MONDAY_0740 = datetime(2026, 3, 30, 5, 40, tzinfo=UTC)
LATE = timedelta(minutes=5)


def test_watchdog_a_skipped_morning_report_tick_is_missed_and_a_tick_heals_it() -> None:
    due = last_due(MORNING, ZONE, MONDAY_0740 - LATE)
    assert due == datetime(2026, 3, 30, 5, 30, tzinfo=UTC)  # 07:30 CEST, the day after DST
    friday = datetime(2026, 3, 27, 6, 30, tzinfo=UTC)  # its last tick: Friday 07:30 CET
    since = datetime(2026, 3, 1, tzinfo=UTC)
    what = missed_tick(Tick("morning_report_weekdays", due, friday, since), zone=ZONE)
    assert what == (
        "morning_report_weekdays missed its tick of 2026-03-30 07:30 CEST "
        "(its last tick was 2026-03-27 07:30 CET)"
    )
    # Within the tolerance the tick is not missed yet; once it came, nothing is.
    early = last_due(MORNING, ZONE, datetime(2026, 3, 30, 5, 32, tzinfo=UTC) - LATE)
    assert missed_tick(Tick("m", early, friday, since), zone=ZONE) is None
    assert missed_tick(Tick("m", due, due + timedelta(seconds=2), since), zone=ZONE) is None
    # Switched on after its moment: nothing was missed.
    assert missed_tick(Tick("m", due, None, due + timedelta(minutes=1)), zone=ZONE) is None


def test_watchdog_a_daemon_without_heartbeats_is_one_cause_naming_what_it_stalls() -> None:
    now = datetime(2026, 3, 30, 6, tzinfo=UTC)
    beats = {name: now - timedelta(seconds=20) for name in DAEMONS}
    assert stale_daemons(beats, now=now, late=timedelta(minutes=3)) == []
    beats["SCHEDULER"] = now - timedelta(minutes=4, seconds=5)
    del beats["BACKFILL"]
    stale = stale_daemons(beats, now=now, late=timedelta(minutes=3))
    assert stale == ["SCHEDULER 4 min 05 s ago", "BACKFILL never"]
    missed = [("morning_report_weekdays", "morning_report_weekdays missed its tick of …")]
    late = [("alert_checks", "alert_checks last evaluated 5 min 00 s ago (every 30 s)")]
    [cause] = causes(stale=stale, missed=missed, late=late, now=now)
    assert cause.id == "daemon"
    assert "no heartbeat from the daemon (SCHEDULER 4 min 05 s ago, BACKFILL never)" in (
        cause.message
    )
    assert "Meanwhile: morning_report_weekdays missed its tick of …; alert_checks" in cause.message
    # With the daemon beating, each stall is its own cause.
    found = causes(stale=[], missed=missed, late=late, now=now)
    assert [c.id for c in found] == ["schedule:morning_report_weekdays", "sensor:alert_checks"]


def test_watchdog_a_sensor_left_behind_is_late_after_three_intervals_and_the_tolerance() -> None:
    now = datetime(2026, 3, 30, 6, tzinfo=UTC)
    on = now - timedelta(hours=1)
    fine = Evaluation("alert_checks", now - timedelta(seconds=90), 30, on)
    assert late_evaluation(fine, now=now, late=timedelta(seconds=60)) is None
    behind = Evaluation("alert_checks", now - timedelta(seconds=151), 30, on)
    assert late_evaluation(behind, now=now, late=timedelta(seconds=60)) == (
        "alert_checks last evaluated 2 min 31 s ago (every 30 s)"
    )
    never = Evaluation("crm_events", None, 2, now - timedelta(minutes=2))
    assert late_evaluation(never, now=now, late=timedelta(seconds=60)) == (
        "crm_events never evaluated (every 2 s)"
    )


def test_watchdog_decides_what_begins_and_heals_and_nothing_heals_under_a_dead_daemon() -> None:
    now = datetime(2026, 3, 30, 6, tzinfo=UTC)
    schedule = causes(stale=[], missed=[("s", "s missed")], late=[], now=now)
    first = decide(schedule, [])
    assert ([c.id for c in first.begin], first.healed) == (["schedule:s"], [])
    again = decide(schedule, ["schedule:s"])
    assert (again.begin, again.healed) == ([], [])  # once per stall
    daemon = causes(stale=["SENSOR never"], missed=[], late=[], now=now)
    under = decide(daemon, ["schedule:s"])
    assert ([c.id for c in under.begin], under.healed) == (["daemon"], [])
    back = decide([], ["schedule:s", "daemon"], {"schedule:s"})
    assert back.healed == ["schedule:s", "daemon"]
    # The watchdog's own silence (raised by the alert checks) heals when it looks again.
    assert decide([], ["watchdog"], {"watchdog"}).healed == ["watchdog"]
    assert watchdog_silent(now - timedelta(minutes=9), now=now, every_s=60) is None
    silent = watchdog_silent(now - timedelta(minutes=11), now=now, every_s=60)
    assert silent is not None
    assert silent.message.startswith("no look since 11 min 00 s ago")
    assert watchdog_silent(None, now=now, every_s=60) is None  # none on this machine yet
    # A schedule switched off (or gone) is not looked at: it is not "running again".
    stopped = decide([], ["schedule:s"], set())
    assert stopped.healed == []
