"""Webhook to watch through the real machine: ``followup dev --no-demo`` (its embedded Postgres,
sandbox, ingress, Dagster daemon and webserver) on free ports, the ``crm_events`` sensor at its
default interval (``FOLLOWUP_EVENTS_SENSOR_INTERVAL_S`` in this process's environment overrides
it, to compare intervals).

Each round creates one deal in the sandbox's CRM and has the sandbox deliver its webhook at once;
the latency is from the event's receipt (the watch's ``registered_at`` is the event's
``received_at``) to the moment the watch is first seen in the database (polled every 0.2 s).
Rounds are spaced at random, so deliveries land at every phase of the sensor's interval.

Then where each webhook's time went, from the event (received, done), Dagster's records of the
``register`` run that did it (created, dequeued, started, its step started) and of the sensor tick
that launched that run: the wait for an earlier run still in flight (the sensor launches none
meanwhile), for the tick, the tick's own work, the queue, the run's start, its step's start, and
the work. (Dagster 1.13 records no event when the coordinator dequeues a run: the launch's
``RUN_STARTING`` marks it.)
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import psycopg

from benchmarks.harness import free_port
from followup_pipeline.machine import open_instance
from followup_pipeline.settings import load_settings
from followup_pipeline.store.embedded import EmbeddedCluster

DEV = [sys.executable, "-m", "followup_pipeline.cli", "dev", "--no-demo"]
ROUNDS = 20
#: The pause between two deliveries: uniform in this range (seconds).
SPACING_S = (2.0, 14.0)
POLL_S = 0.2
#: A watch not seen this long after its webhook fails the benchmark.
GIVE_UP_S = 300
#: Passed on to the machine when set here (the rest of FOLLOWUP_* is not).
INTERVAL_VARIABLE = "FOLLOWUP_EVENTS_SENSOR_INTERVAL_S"
#: The stages of a webhook's way, in order: (column, what it is).
STAGES = (
    ("in flight", "an earlier `register` run still in flight: the sensor launches none meanwhile"),
    ("sensor", "the rest of the wait for the sensor tick that launched its run"),
    ("tick", "that tick's work until the run was created"),
    ("queue", "created until the queued-run coordinator took it and began its launch"),
    ("start", "launch until the run started (a new run worker process loads the code)"),
    ("step", "the run's start until its step started (the executor's step process)"),
    ("work", "the step's work until the event was done (its watch written)"),
    ("seen", "done until the benchmark's poll saw the watch"),
)


@contextlib.contextmanager
def machine() -> Iterator[tuple[str, Path]]:
    """A whole ``followup dev --no-demo`` on free ports: (sandbox URL, FOLLOWUP_HOME)."""
    with tempfile.TemporaryDirectory(prefix="followup-latency-") as root:
        home, sandbox_port = Path(root) / "home", free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}
        env.update(
            FOLLOWUP_HOME=str(home),
            FOLLOWUP_SANDBOX_PORT=str(sandbox_port),
            FOLLOWUP_INGRESS_PORT=str(free_port()),
        )
        if INTERVAL_VARIABLE in os.environ:
            env[INTERVAL_VARIABLE] = os.environ[INTERVAL_VARIABLE]
        console = Path(root) / "console.txt"
        with console.open("wb") as out:
            process = subprocess.Popen(
                [*DEV, "--port", str(free_port())],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                deadline = time.monotonic() + 240
                while "Followup is up" not in console.read_text():
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"followup dev did not start:\n{console.read_text()}")
                    time.sleep(0.5)
                yield f"http://127.0.0.1:{sandbox_port}", home.resolve()
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGINT)
                process.wait(timeout=120)


@dataclass(frozen=True)
class Run:
    """A ``register`` run as Dagster recorded it (epoch seconds)."""

    run_id: str
    tick: float | None
    created: float
    launched: float | None
    started: float | None
    step: float | None
    ended: float | None


@dataclass(frozen=True)
class Webhook:
    """One webhook's way (epoch seconds) and the run that did it."""

    received: float
    done: float
    seen: float
    run: Run | None

    def stages(self, runs: Sequence[Run]) -> list[float]:
        """Seconds spent in each of ``STAGES``; they add up to the latency. A webhook that came
        while its run was already going (a later batch of that run took it) spends nothing
        before ``work``."""
        run = self.run
        points = [
            run.tick if run else None,
            run.created if run else None,
            run.launched if run else None,
            run.started if run else None,
            run.step if run else None,
            self.done,
            self.seen,
        ]
        at, marks = self.received, [self.received]
        for point in points:
            at = max(at, point if point is not None else at)
            marks.append(at)
        waits = [b - a for a, b in itertools.pairwise(marks)]
        # Of the wait for the tick: how long an earlier run was still in flight.
        before = [r.ended for r in runs if r is not run and r.created <= self.received]
        ended = [e for e in before if e is not None and e > self.received]
        blocked = min(max(ended, default=self.received) - self.received, waits[0])
        return [blocked, waits[0] - blocked, *waits[1:]]


def _events(instance: Any, run_id: str) -> dict[Any, float]:
    """The first time of each lifecycle event of a run."""
    kinds = {
        dg.DagsterEventType.RUN_STARTING,
        dg.DagsterEventType.RUN_START,
        dg.DagsterEventType.STEP_START,
    }
    found: dict[Any, float] = {}
    for entry in instance.all_logs(run_id, of_type=kinds):
        kind = entry.dagster_event.event_type if entry.dagster_event else None
        found.setdefault(kind, float(entry.timestamp))
    return found


def register_runs(home: Path) -> tuple[list[Run], list[float]]:
    """The ``register`` runs of the machine at ``home``, and the times of the ``crm_events``
    sensor's ticks (to show its effective interval)."""
    with open_instance(load_settings(home=home)) as instance:
        states = [s for s in instance.all_instigator_state() if s.instigator_name == "crm_events"]
        ticks = [
            tick
            for state in states
            for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id)
        ]
        launched_by = {run_id: tick.timestamp for tick in ticks for run_id in tick.run_ids}
        runs = []
        for record in instance.get_run_records(filters=dg.RunsFilter(job_name="register")):
            run_id = record.dagster_run.run_id
            events = _events(instance, run_id)
            runs.append(
                Run(
                    run_id=run_id,
                    tick=launched_by.get(run_id),
                    created=record.create_timestamp.timestamp(),
                    launched=events.get(dg.DagsterEventType.RUN_STARTING),
                    started=record.start_time or events.get(dg.DagsterEventType.RUN_START),
                    step=events.get(dg.DagsterEventType.STEP_START),
                    ended=record.end_time,
                )
            )
    return sorted(runs, key=lambda r: r.created), sorted(tick.timestamp for tick in ticks)


def _run_of(done: float, runs: Sequence[Run]) -> Run | None:
    """The run that was going when an event was done."""
    going = [r for r in runs if r.started is not None and r.started <= done <= (r.ended or done)]
    return going[-1] if going else None


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _settle(home: Path) -> None:
    """Wait until no ``register`` run is in flight (the last one ends after its watch)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs, _ = register_runs(home)
        if all(run.ended is not None for run in runs):
            return
        time.sleep(1)


def run() -> list[str]:
    """The lines of the section of docs/benchmarks.md."""
    interval = load_settings().events_sensor_interval_s
    rng = random.Random(7)  # the spacing, not a secret
    seen_at: dict[str, float] = {}
    with machine() as (sandbox, home), httpx.Client(base_url=f"{sandbox}/_sandbox") as control:
        url = EmbeddedCluster(home).url("followup")
        stage = load_settings().watched_stages[0]
        pending: dict[str, None] = {}
        with psycopg.connect(url, autocommit=True) as conn:
            next_at = time.monotonic()
            sent = 0
            deadline = None
            while sent < ROUNDS or pending:
                if sent < ROUNDS and time.monotonic() >= next_at:
                    answer = control.post(
                        "/deals", json={"deals": [{"name": f"Latency {sent}", "stage": stage}]}
                    )
                    answer.raise_for_status()
                    pending[answer.json()["deals"][0]["id"]] = None
                    control.post("/webhooks/flush", json={}, timeout=30).raise_for_status()
                    sent += 1
                    next_at = time.monotonic() + rng.uniform(*SPACING_S)
                    deadline = time.monotonic() + GIVE_UP_S
                rows = conn.execute(
                    "SELECT subject_id FROM followup.watches WHERE subject_id = ANY(%s)",
                    (list(pending),),
                ).fetchall()
                seen = datetime.now(UTC).timestamp()
                for (subject_id,) in rows:
                    seen_at[subject_id] = seen
                    pending.pop(subject_id)
                if deadline is not None and time.monotonic() > deadline:
                    raise RuntimeError(f"no watch {GIVE_UP_S} s after the webhook: {pending}")
                time.sleep(POLL_S)
            events = conn.execute(
                "SELECT w.subject_id, e.received_at, e.processed_at FROM followup.watches w"
                " JOIN followup.events e ON e.id = w.source_event_id"
                " WHERE w.subject_id = ANY(%s)",
                (list(seen_at),),
            ).fetchall()
        _settle(home)
        runs, ticks = register_runs(home)
    webhooks = sorted(
        (
            Webhook(
                received=received.timestamp(),
                done=(processed or received).timestamp(),
                seen=seen_at[subject_id],
                run=_run_of((processed or received).timestamp(), runs),
            )
            for subject_id, received, processed in events
        ),
        key=lambda w: w.received,
    )
    return report(webhooks, runs, ticks, interval)


def report(
    webhooks: Sequence[Webhook], runs: Sequence[Run], ticks: Sequence[float], interval: int
) -> list[str]:
    """The section: the latency, then where each webhook's time went."""
    latencies = [w.seen - w.received for w in webhooks]
    p50, p99 = statistics.median(latencies), _percentile(latencies, 0.99)
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    every = f"{statistics.median(gaps):.1f} s" if gaps else "n/a"
    stages = [w.stages(runs) for w in webhooks]
    names = [name for name, _ in STAGES]
    lines = [
        f"{len(webhooks)} webhooks, one deal each, spaced {SPACING_S[0]:.0f}–{SPACING_S[1]:.0f} s"
        f" apart at random; `crm_events` sensor every {interval} s (`minimum_interval_seconds`;"
        f" its ticks came every {every}, median); {len(runs)} `register` runs.",
        "",
        "| webhooks | p50 | p99 | min | max | sensor interval (baseline) | p50 / interval |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {len(latencies)} | {p50:.1f} s | {p99:.1f} s | {min(latencies):.1f} s"
        f" | {max(latencies):.1f} s | {interval} s | {p50 / interval:.2f} |",
        "",
        "Where each webhook's time went, in seconds: "
        + "; ".join(f"**{name}**: {what}" for name, what in STAGES)
        + ".",
        "",
        "| webhook | " + " | ".join(names) + " | total |",
        "|---:|" + "---:|" * (len(names) + 1),
    ]
    for number, (latency, spent) in enumerate(zip(latencies, stages, strict=True), start=1):
        cells = " | ".join(f"{s:.1f}" for s in spent)
        lines.append(f"| {number} | {cells} | {latency:.1f} |")
    medians = " | ".join(f"{statistics.median(column):.1f}" for column in zip(*stages, strict=True))
    lines += [f"| median | {medians} | {p50:.1f} |", ""]
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
