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
    """Counts and problems of one worker; workers return theirs, the op adds them up."""

    log: Log
    counts: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the count ``name``."""
        self.counts[name] += n

    def problem(self, message: str) -> None:
        """A single item failed: it is skipped, the run ends ``partial``."""
        self.problems.append(message)
        self.counts["problems"] += 1
        self.log.warning(message)

    def add(self, other: "Tally") -> "Tally":
        """This tally with ``other``'s counts and problems added."""
        self.counts.update(other.counts)
        self.problems.extend(other.problems)
        return self

    def metadata(self) -> RunCounts:
        """Counts and the first problems, as run metadata."""
        data: RunCounts = dict(sorted(self.counts.items()))
        if self.problems:
            data["problem_list"] = dg.MetadataValue.md(
                "\n".join(f"- {p}" for p in self.problems[:SHOWN_PROBLEMS])
            )
        return data

    @classmethod
    def of(cls, log: Log, counts: Mapping[str, int], problems: list[str]) -> "Tally":
        """A tally that starts from earlier counts and problems."""
        return cls(log, Counter(counts), list(problems))
