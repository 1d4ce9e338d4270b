"""The sandbox's one clock, read by its state, its vendors and its webhook queue."""

from datetime import UTC, datetime, timedelta

ESPO_DATETIME = "%Y-%m-%d %H:%M:%S"


class Clock:
    """The sandbox's clock: real UTC time, or a start instant that ticks on; it can be moved."""

    def __init__(self, start: datetime | None = None) -> None:
        self._offset = timedelta(0)
        if start is not None:
            self.set(start)

    def reset(self, start: datetime | None = None) -> None:
        """Back to real time, or to ``start`` (ticking on)."""
        self._offset = timedelta(0)
        if start is not None:
            self.set(start)

    def now(self) -> datetime:
        """The current sandbox instant (aware, UTC)."""
        return datetime.now(UTC) + self._offset

    def set(self, instant: datetime) -> None:
        """Make ``now()`` return ``instant`` from here on (and tick on)."""
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=UTC)
        self._offset = instant - datetime.now(UTC)

    def advance(self, seconds: float) -> None:
        """Move the clock forward (or back, if negative)."""
        self._offset += timedelta(seconds=seconds)

    def espo(self) -> str:
        """The current instant as EspoCRM writes datetimes: ``YYYY-MM-DD HH:mm:ss`` in UTC."""
        return self.now().astimezone(UTC).strftime(ESPO_DATETIME)

    def millis(self) -> int:
        """The current instant in Unix milliseconds (ClickUp's dates)."""
        return int(self.now().timestamp() * 1000)
