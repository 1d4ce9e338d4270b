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
query($job: String!) {
  runsOrError(filter: {pipelineName: $job}) {
    ... on Runs { results { runId status startTime endTime tags { key value } } }
  }
}
"""


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
    delivery is one stored event, done, its one item completed once, and
    its deal has one watch opened by a webhook."""
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
    watches = Counter(
        str(row["subject_id"])
        for row in conn.execute(
            "SELECT subject_id FROM watches WHERE registered_by = %s", ("webhook",)
        )
    )
    watched = Check("acknowledged deals watched once", len(acked))
    for delivery in acked:
        if watches[delivery["deal"]] != 1:
            watched.broken.append(f"{delivery['deal']}: {watches[delivery['deal']]} watches")
    gave_up = Check("webhooks acknowledged (none given up)", len(deliveries))
    gave_up.broken = [d["deal"] for d in deliveries if not d.get("acked")]
    return [once, done, watched, gave_up]


def runs(edge_ui: str, ca: str, password: str, job: str) -> list[dict[str, Any]]:
    """The runs of ``job``, through the edge (the UI's password) to the webserver's GraphQL."""
    answer = httpx.post(
        f"{edge_ui}/graphql",
        json={"query": RUNS, "variables": {"job": job}},
        auth=("operator", password),
        verify=ca,
        timeout=30,
    )
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()["data"]["runsOrError"]["results"]
    for run in found:
        run["tags"] = {tag["key"]: tag["value"] for tag in run["tags"]}
    return found


def most_at_once(found: list[dict[str, Any]]) -> int:
    """The most runs that were executing at one instant."""
    edges = []
    for run in found:
        if run.get("startTime") and run.get("endTime"):
            edges += [(float(run["startTime"]), 1), (float(run["endTime"]), -1)]
    peak = current = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        current += step
        peak = max(peak, current)
    return peak


def single_check(found: list[dict[str, Any]]) -> Check:
    """No two ``evaluate`` runs that did the work (not ``skipped``) ran at the same time."""
    working = [r for r in found if r["tags"].get("followup/outcome") != "skipped"]
    check = Check("evaluate single across hosts: none at once, one skipped by the lock", len(found))
    if most_at_once(working) > 1:
        check.broken.append(f"{most_at_once(working)} evaluate runs worked at once")
    if len(working) == len(found):
        check.broken.append("no run met another: the lock was not shown")
    unfinished = [r["runId"] for r in found if r["status"] not in ("SUCCESS", "FAILURE")]
    check.broken += [f"run {run} did not finish" for run in unfinished]
    return check


def when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%H:%M:%S")
