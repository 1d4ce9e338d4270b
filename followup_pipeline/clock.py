"""Where "now" comes from: the system clock, or a clock started at ``FOLLOWUP_NOW`` that ticks.

Every function that needs the time takes it from a clock, so a month can be simulated and the
DST days tested. A settable clock serves tests and the simulation.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from followup_pipeline.domain.localtime import require_aware

log = logging.getLogger(__name__)


class Clock(Protocol):
    """Anything that tells the current instant (aware, UTC)."""

    def now(self) -> datetime: ...


class SystemClock:
    """The real time."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class TickingClock:
    """Starts at a given instant and moves on with real time."""

    def __init__(self, start: datetime) -> None:
        self._start = require_aware(start)
        self._anchor = time.monotonic()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=time.monotonic() - self._anchor)


class SettableClock:
    """Stands still until told otherwise: for tests and simulations."""

    def __init__(self, start: datetime) -> None:
        self._now = require_aware(start)

    def now(self) -> datetime:
        return self._now

    def set(self, instant: datetime) -> None:
        """Jump to ``instant``."""
        self._now = require_aware(instant)

    def advance(self, **delta: float) -> datetime:
        """Move forward by ``timedelta(**delta)`` and return the new now."""
        self._now += timedelta(**delta)
        return self._now


def build_clock(start: datetime | None, *, ticking: bool = True) -> Clock:
    """The system clock, or one started at ``start`` (announced loudly: time is not real)."""
    if start is None:
        return SystemClock()
    log.warning(
        "FOLLOWUP_NOW is set: this process's clock starts at %s, not the real time",
        require_aware(start).isoformat(),
    )
    return TickingClock(start) if ticking else SettableClock(start)
