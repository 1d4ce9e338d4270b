"""The frozen scope of one run (its instant, its id, its log) and the tally it reports."""

from collections import Counter
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

import dagster as dg
import psycopg

#: Problems shown in a run's metadata at most (all are in its log).
SHOWN_PROBLEMS = 50
#: Business counts of a run (registered, closed by reason, fired, ...), shown as run metadata.
RunCounts = dict[str, Any]


class Log(Protocol):
    """Dagster's op log or a plain ``logging.Logger``."""

    def info(self, msg: str, *args: object) -> None:
        """Log at info level."""
        ...

    def warning(self, msg: str, *args: object) -> None:
        """Log at warning level."""
        ...


class Database(Protocol):
    """Pooled connections that commit on success and roll back on error (``PostgresResource``)."""

    def connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection for one unit of work."""
        ...


@dataclass(frozen=True)
class RunScope:
    """One run at one instant: every worker of the run reads ``now`` from here, records
    ``run_id`` on what it does, and logs to ``log``."""

    now: datetime
    run_id: str | None
    log: Log

    def at(self, now: datetime) -> "RunScope":
        """The same run at another instant."""
        return replace(self, now=now)


@dataclass
class Tally:
    """Counts and problems of one worker; workers return theirs, the op adds them up. A problem
    caused by a vendor is counted against it (``skipped``: what it left undone, with the first
    error), so that the run's outcome says what it skipped and why (``degraded``)."""

    log: Log
    counts: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    causes: dict[str, str] = field(default_factory=dict)
    items: dict[str, list[str]] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the count ``name``."""
        self.counts[name] += n

    def problem(
        self, message: str, cause: BaseException | None = None, *, item: str | None = None
    ) -> None:
        """A single item failed: it is skipped, the run ends ``partial``. With ``cause`` (an
        error that names its vendor), counted against that vendor, and ``item`` (``deal 7``)
        named among what it skipped."""
        self.problems.append(message)
        self.counts["problems"] += 1
        self.log.warning(message)
        self.skip(cause, message, item=item)

    def skip(self, cause: BaseException | None, message: str, *, item: str | None = None) -> None:
        """Count what ``cause``'s vendor left undone (``item``, if named), without another
        problem: an item that waits on a problem already counted."""
        vendor = getattr(cause, "vendor", None)
        if not isinstance(vendor, str) or not vendor:
            return
        self.skipped[vendor] += 1
        self.causes.setdefault(vendor, message)
        if item is not None:
            named = self.items.setdefault(vendor, [])
            if len(named) < NAMED_ITEMS:
                named.append(item)

    def add(self, other: "Tally") -> "Tally":
        """This tally with ``other``'s counts and problems added."""
        self.counts.update(other.counts)
        self.problems.extend(other.problems)
        self.skipped.update(other.skipped)
        for vendor, message in other.causes.items():
            self.causes.setdefault(vendor, message)
        for vendor, named in other.items.items():
            mine = self.items.setdefault(vendor, [])
            mine.extend(named[: max(0, NAMED_ITEMS - len(mine))])
        return self

    def degraded(self) -> str | None:
        """What the run skipped, by vendor, with the first error of each (None: nothing was
        skipped for a vendor); the run's ``followup/degraded`` tag (``engine/runs.py``)."""
        return degraded_line(self.skipped, self.causes, self.items)

    def metadata(self) -> RunCounts:
        """Counts and the first problems, as run metadata."""
        data: RunCounts = dict(sorted(self.counts.items()))
        if self.problems:
            data["problem_list"] = dg.MetadataValue.md(
                "\n".join(f"- {p}" for p in self.problems[:SHOWN_PROBLEMS])
            )
        return data

    @classmethod
    def of(
        cls,
        log: Log,
        counts: Mapping[str, int],
        problems: list[str],
        skipped: Mapping[str, int] | None = None,
        causes: Mapping[str, str] | None = None,
        items: Mapping[str, list[str]] | None = None,
    ) -> "Tally":
        """A tally that starts from earlier counts, problems and skips."""
        return cls(
            log,
            Counter(counts),
            list(problems),
            Counter(skipped),
            dict(causes or {}),
            {vendor: list(named) for vendor, named in (items or {}).items()},
        )


#: Skipped items a run names per vendor (the rest are counted).
NAMED_ITEMS = 10


def degraded_line(
    skipped: Mapping[str, int],
    causes: Mapping[str, str],
    items: Mapping[str, list[str]] | None = None,
) -> str | None:
    """``espocrm: 7 skipped (deal 7, deal 9, …); first error: CRM unreachable, …: HTTP 503``,
    per vendor, the vendor that skipped most first; None when nothing was skipped."""
    if not skipped:
        return None
    parts = []
    for vendor, count in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])):
        named = (items or {}).get(vendor) or []
        more = ", …" if named and count > len(named) else ""
        which = f" ({', '.join(named)}{more})" if named else ""
        error = causes.get(vendor, "no error recorded")
        parts.append(f"{vendor}: {count} skipped{which}; first error: {error}")
    return "; ".join(parts)
