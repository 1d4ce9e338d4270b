"""What the scale proof checks once the load is over, read on the operator's host: the event
log, the watches and the completions in Postgres, and the runs through the Dagster UI's GraphQL
behind the edge (with the operator's password)."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg

RUNS = """
query($filter: RunsFilter) {
  runsOrError(filter: $filter) {
    ... on Runs {
      results { runId jobName status creationTime startTime endTime tags { key value } }
    }
  }
}
"""
#: The tag the proof gives the runs it launches itself (what the run is for).
PROOF_TAG = "scaleproof/run"
#: A run's statuses once it is over.
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")
#: The tag Dagster gives a run its schedule launched.
SCHEDULE_TAG = "dagster/schedule_name"


@dataclass
class Check:
    """One line of the proof's table: what was checked, over how many, and whether it held."""

    name: str
    checked: int
    broken: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return self.checked > 0 and not self.broken


def events_check(conn: psycopg.Connection[Any], deliveries: list[dict[str, Any]]) -> list[Check]:
    """(``conn`` gives dict rows, as ``store.db.connect`` makes them.) Every acknowledged
    delivery is one stored event, done, its one item completed once, and its deal has one
    watch, opened by its webhook or by ``evaluate``'s reconciliation."""
    acked = [d for d in deliveries if d.get("acked")]
    stored = Counter[str]()
    status: dict[str, tuple[str, int, int]] = {}
    rows = conn.execute(
        "SELECT e.body, e.status, e.attempts,"
        " (SELECT count(*) FROM step_completions c WHERE c.event_id = e.id) AS completions"
        " FROM events e WHERE e.source = %s",
        ("espocrm",),
    ).fetchall()
    for row in rows:
        sha = hashlib.sha256(bytes(row["body"])).hexdigest()
        stored[sha] += 1
        status[sha] = (str(row["status"]), int(row["attempts"]), int(row["completions"]))
    once = Check("acknowledged webhooks stored once", len(acked))
    done = Check("stored events processed (done, one completion each)", len(acked))
    for delivery in acked:
        sha = delivery["sha"]
        if stored[sha] != 1:
            once.broken.append(f"{delivery['deal']}: stored {stored[sha]} times")
        elif status[sha][0] != "done" or status[sha][2] != 1:
            state, _, completions = status[sha]
            done.broken.append(f"{delivery['deal']}: {state}, {completions} completions")
    # Whatever opened it: the deal's webhook (``register``) or, when the hourly ``evaluate`` met
    # the load, its reconciliation, which opens the watch of a listed deal whose webhook is not
    # processed yet (the webhook then finds it open). Once either way, never twice.
    watches = Counter[str]()
    for row in conn.execute("SELECT subject_id FROM watches"):
        watches[str(row["subject_id"])] += 1
    watched = Check(
        "acknowledged deals watched once (by a webhook or the reconciliation)", len(acked)
    )
    for delivery in acked:
        if watches[delivery["deal"]] != 1:
            watched.broken.append(f"{delivery['deal']}: {watches[delivery['deal']]} watches")
    gave_up = Check("webhooks acknowledged (none given up)", len(deliveries))
    gave_up.broken = [d["deal"] for d in deliveries if not d.get("acked")]
    return [once, done, watched, gave_up]


def runs(edge_ui: str, ca: str, password: str, job: str | None) -> list[dict[str, Any]]:
    """The runs of ``job`` (of every job: None), through the edge (the UI's password) to the
    webserver's GraphQL."""
    variables = {"filter": {"pipelineName": job}} if job else {}
    answer = httpx.post(
        f"{edge_ui}/graphql",
        json={"query": RUNS, "variables": variables},
        auth=("operator", password),
        verify=ca,
        timeout=30,
    )
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()["data"]["runsOrError"]["results"]
    for run in found:
        run["tags"] = {tag["key"]: tag["value"] for tag in run["tags"]}
    return found


def most_at_once(found: list[dict[str, Any]], until: float | None = None) -> int:
    """The most runs that were executing at one instant (a run not ended yet counts as
    executing ``until``, when given; else it does not count)."""
    edges = []
    for run in found:
        end = run.get("endTime") or until
        if run.get("startTime") and end:
            edges += [(float(run["startTime"]), 1), (float(end), -1)]
    peak = current = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        current += step
        peak = max(peak, current)
    return peak


def claim_spans(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Each ``register`` run's span of work, read from the event log: from the first to the
    last event it processed (``processed_at`` of the events it claimed and did, by the
    ``claimed_by`` of its worker), as ``startTime``/``endTime`` for ``most_at_once``. A run
    killed with its claims ends where its last event was done: the events it left are
    another run's."""
    rows = conn.execute(
        "SELECT claimed_by, count(*) AS events,"
        " extract(epoch FROM min(processed_at)) AS first,"
        " extract(epoch FROM max(processed_at)) AS last"
        " FROM events WHERE source = %s AND status = 'done' AND claimed_by IS NOT NULL"
        " GROUP BY claimed_by",
        ("espocrm",),
    ).fetchall()
    return [
        {
            "claimer": str(row["claimed_by"]),
            "events": int(row["events"]),
            "startTime": float(row["first"]),
            "endTime": float(row["last"]),
        }
        for row in rows
    ]


def single_check(found: list[dict[str, Any]]) -> Check:
    """No two ``evaluate`` runs that did the work (not ``skipped``) ran at the same time,
    whoever launched them: the proof through the queue, the hourly schedule when it met the
    proof, or Dagster's retry of a failed one; the one out of the queue was turned away."""
    working = [r for r in found if r["tags"].get("followup/outcome") != "skipped"]
    check = Check("evaluate single across hosts: none at once, one skipped by the lock", len(found))
    if most_at_once(working) > 1:
        check.broken.append(f"{most_at_once(working)} evaluate runs worked at once")
    if len(working) == len(found):
        check.broken.append("no run met another: the lock was not shown")
    unfinished = [r["runId"] for r in found if r["status"] not in FINISHED]
    check.broken += [f"run {run} did not finish" for run in unfinished]
    return check


def origin(run: dict[str, Any]) -> str:
    """Who launched a run: its schedule, a sensor, Dagster's retry, the proof (its tag)."""
    tags = run["tags"]
    if SCHEDULE_TAG in tags:
        return f"schedule {tags[SCHEDULE_TAG]}"
    if "dagster/parent_run_id" in tags:
        return "retry"
    if "dagster/sensor_name" in tags:
        return f"sensor {tags['dagster/sensor_name']}"
    return str(tags.get(PROOF_TAG, "other"))


def when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%H:%M:%S")
