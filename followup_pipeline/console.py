"""The console of ``followup dev``: its lines stamped in the team's zone, and one line per
finished run, read from the UI's GraphQL.

The console is what an operator watches while the machine runs, so it speaks as every other
surface a person reads does: times in the team's zone (``FOLLOWUP_TIMEZONE``) with the zone's
abbreviation, not the host's; and a failed run says why in its own line (the first line of its
first failed step's error, cut at a word), so the common failures need no trip to the UI. What
cannot be read leaves the line as it was: the link to the run is always there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import httpx

from followup_pipeline.domain.localtime import time_of_day_for_people
from followup_pipeline.domain.text import clean_text, cut_at_word
from followup_pipeline.engine.runs import COUNTS_TAG, OUTCOME_TAG
from followup_pipeline.resources import CLOCK_TAG

#: How long the console waits for one answer of the UI; a busy UI costs a poll, not the console.
UI_TIMEOUT_S = 5.0
#: The most characters of a failure's reason on a console line (a terminal's width or two).
REASON_LIMIT = 160
#: A run's events are read a page at a time, and at most this many pages (a failed run is short;
#: one that logged more has its link still).
EVENTS_PAGE = 1000
MAX_EVENT_PAGES = 10

FINISHED_RUNS = """
query($after: Float!) {
  runsOrError(filter: {statuses: [SUCCESS, FAILURE, CANCELED], updatedAfter: $after}, limit: 50) {
    ... on Runs { results { runId jobName status updateTime tags { key value } } }
  }
}
"""
#: A run's failures, in the order they happened: each failed step's error (Dagster wraps a
#: user's error in its own: the causes, three deep, reach it) and the run's own failure, whose
#: message is all there is when no step failed (e.g. ``dagster/max_runtime`` exceeded).
FAILURE_EVENTS = """
query($runId: ID!, $after: String, $limit: Int) {
  logsForRun(runId: $runId, afterCursor: $after, limit: $limit) {
    __typename
    ... on EventConnection {
      cursor
      hasMore
      events {
        __typename
        ... on ExecutionStepFailureEvent { error { ...chain } }
        ... on RunFailureEvent { message error { ...chain } }
      }
    }
  }
}
fragment chain on PythonError {
  className message cause { className message cause { className message cause {
    className message
  } } }
}
"""


def say(message: str, zone: str) -> None:
    """Print one console line, stamped with the wall clock (never ``FOLLOWUP_NOW``'s: the stamp
    says when the line was printed) in the team's ``zone``."""
    print(f"{time_of_day_for_people(datetime.now(UTC), zone)} {message}", flush=True)


def run_line(run: dict[str, Any], ui: str, reason: str | None = None) -> str:
    """The console's line for one finished run: job, outcome and business counts; for a run that
    did not succeed, ``reason`` (when known) and its link in the UI."""
    tags = {tag["key"]: tag["value"] for tag in run["tags"]}
    status = str(run["status"])
    outcome = tags.get(OUTCOME_TAG)
    what = f"{status.lower()}" + (f", {outcome}" if outcome and status == "SUCCESS" else "")
    counts = tags.get(COUNTS_TAG, "")
    line = f"run {run['jobName']} {run['runId'][:8]}: {what}" + (f" ({counts})" if counts else "")
    line += f" [clock {tags[CLOCK_TAG]}]" if CLOCK_TAG in tags else ""  # FOLLOWUP_NOW's
    if status != "SUCCESS":  # a failure's reason when known, a canceled run's link alone
        link = f"{ui}/runs/{run['runId']}"
        line += f": {reason} — {link}" if reason else f": {link}"
    return line


def _own_error(error: dict[str, Any]) -> str:
    """The text of the error a run's code raised, under Dagster's wrappers: ``ValueError: …``,
    or a ``dg.Failure``'s description alone (the op wrote it for a person to read)."""
    while error.get("cause") and str(error.get("className", "")).startswith("Dagster"):
        error = error["cause"]
    kind, message = str(error.get("className") or ""), str(error.get("message") or "")
    if not kind:
        return message
    # The message repeats the class, qualified or not ("dagster._core….Failure: …").
    prefix = re.compile(rf"^\s*(?:[\w.]+\.)?{re.escape(kind)}: ")
    return prefix.sub("" if kind == "Failure" else f"{kind}: ", message, count=1)


def first_reason(events: list[dict[str, Any]]) -> str | None:
    """Why a run failed, from its events: its first failed step's error, else the run's own
    failure (its error, or its message when it has none); the first line only, cleaned of
    control characters and cut at a word. None when the events say nothing."""
    steps = [e for e in events if e.get("__typename") == "ExecutionStepFailureEvent"]
    runs = [e for e in events if e.get("__typename") == "RunFailureEvent"]
    texts = [_own_error(e["error"]) for e in steps if e.get("error")]
    texts += [
        _own_error(e["error"]) if e.get("error") else str(e.get("message") or "") for e in runs
    ]
    for text in texts:
        lines = [" ".join(clean_text(line).split()) for line in text.splitlines()]
        if first := next((line for line in lines if line), None):
            return cut_at_word(first, REASON_LIMIT)
    return None


class FinishedRuns:
    """Finished runs from the UI's GraphQL, each reported once: ``new`` gives their lines."""

    def __init__(self, ui: str, *, transport: httpx.BaseTransport | None = None) -> None:
        self.ui = ui
        self.client = httpx.Client(transport=transport, timeout=UI_TIMEOUT_S)
        self.since = datetime.now(UTC).timestamp()
        self.seen: set[str] = set()

    def __enter__(self) -> FinishedRuns:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.client.close()

    def _query(self, query: str, variables: dict[str, Any]) -> Any:
        answer = self.client.post(
            f"{self.ui}/graphql", json={"query": query, "variables": variables}
        )
        answer.raise_for_status()
        return answer.json()["data"]

    def new(self) -> Iterator[str]:
        """Lines for the runs that finished since the last call (none if the UI is busy)."""
        try:
            data = self._query(FINISHED_RUNS, {"after": self.since - 30})
            runs = data["runsOrError"]["results"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return
        for run in sorted(runs, key=lambda r: r["updateTime"] or 0):
            if run["runId"] not in self.seen:
                self.seen.add(run["runId"])
                failed = run["status"] == "FAILURE"
                yield run_line(run, self.ui, self.reason(run["runId"]) if failed else None)

    def reason(self, run_id: str) -> str | None:
        """Why the run failed (``first_reason`` of its events), or None when the UI cannot say:
        not there, refused, busy, or an answer of another shape."""
        events: list[dict[str, Any]] = []
        after: str | None = None
        try:
            for _ in range(MAX_EVENT_PAGES):
                variables = {"runId": run_id, "after": after, "limit": EVENTS_PAGE}
                page = self._query(FAILURE_EVENTS, variables)["logsForRun"]
                if page.get("__typename") != "EventConnection":
                    return None
                events += page["events"]
                if not page["hasMore"]:
                    break
                after = page["cursor"]
            return first_reason(events)
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
            return None
