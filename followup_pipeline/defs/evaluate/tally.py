"""What one part of an evaluation reports: business counts and the problems that made it partial."""

from collections import Counter
from dataclasses import dataclass, field

import dagster as dg

from followup_pipeline.defs.common import RunCounts
from followup_pipeline.defs.evaluate.ports import Log

#: Problems shown in a run's metadata at most (all are in its log).
SHOWN_PROBLEMS = 50


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
