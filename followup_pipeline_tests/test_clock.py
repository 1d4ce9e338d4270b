"""Clocks: real, ticking from FOLLOWUP_NOW (announced), and settable."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

import pytest

from followup_pipeline.clock import SettableClock, SystemClock, TickingClock, build_clock
from followup_pipeline.resources import ClockResource

START = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)


def test_clock_system_is_aware_utc() -> None:
    now = SystemClock().now()
    assert now.tzinfo is UTC
    assert abs((datetime.now(UTC) - now).total_seconds()) < 5


def test_clock_ticking_starts_at_given_instant_and_moves() -> None:
    clock = TickingClock(START)
    first = clock.now()
    time.sleep(0.02)
    second = clock.now()
    assert START <= first < second < START + timedelta(seconds=5)


def test_clock_settable_jumps_and_advances() -> None:
    clock = SettableClock(START)
    assert clock.now() == START
    assert clock.advance(days=21) == START + timedelta(days=21)
    clock.set(datetime(2026, 10, 25, 1, 0, tzinfo=UTC))
    assert clock.now().month == 10


def test_clock_start_is_announced_loudly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        build_clock(START)
    assert "FOLLOWUP_NOW is set" in caplog.text
    assert START.isoformat() in caplog.text


def test_clock_resource_from_iso_string() -> None:
    resource = ClockResource(start="2026-03-29T02:30:00+02:00", ticking=False)
    assert resource.now() == datetime(2026, 3, 29, 0, 30, tzinfo=UTC)
    assert ClockResource().now().year >= 2026
