"""Webhook to watch through the real machine: ``followup dev --no-demo`` (its embedded Postgres,
sandbox, ingress, Dagster daemon and webserver) on free ports, the ``crm_events`` sensor at its
default interval.

Each round creates one deal in the sandbox's CRM and has the sandbox deliver its webhook at once;
the latency is from the event's receipt (the watch's ``registered_at`` is the event's
``received_at``) to the moment the watch is first seen in the database (polled every 0.2 s).
Rounds are spaced at random, so deliveries land at every phase of the sensor's interval.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg

from benchmarks.harness import free_port
from followup_pipeline.settings import load_settings
from followup_pipeline.store.embedded import EmbeddedCluster

DEV = [sys.executable, "-m", "followup_pipeline.cli", "dev", "--no-demo"]
ROUNDS = 20
#: The pause between two deliveries: uniform in this range (seconds).
SPACING_S = (2.0, 14.0)
POLL_S = 0.2
#: A watch not seen this long after its webhook fails the benchmark.
GIVE_UP_S = 300


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


def run() -> list[str]:
    """The lines of the section of docs/benchmarks.md."""
    interval = load_settings().events_sensor_interval_s
    rng = random.Random(7)  # the spacing, not a secret
    latencies: list[float] = []
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
                    "SELECT subject_id, registered_at FROM followup.watches "
                    "WHERE subject_id = ANY(%s)",
                    (list(pending),),
                ).fetchall()
                seen = datetime.now(UTC)
                for subject_id, registered_at in rows:
                    latencies.append((seen - registered_at).total_seconds())
                    pending.pop(subject_id)
                if deadline is not None and time.monotonic() > deadline:
                    raise RuntimeError(f"no watch {GIVE_UP_S} s after the webhook: {pending}")
                time.sleep(POLL_S)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
    return [
        f"{ROUNDS} webhooks, one deal each, spaced {SPACING_S[0]:.0f}–{SPACING_S[1]:.0f} s apart"
        f" at random; `crm_events` sensor every {interval} s (the default).",
        "",
        "| webhooks | p50 | p99 | min | max | sensor interval (baseline) | p50 / interval |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {len(latencies)} | {statistics.median(latencies):.1f} s | {p99:.1f} s "
        f"| {latencies[0]:.1f} s | {latencies[-1]:.1f} s | {interval} s "
        f"| {statistics.median(latencies) / interval:.2f} |",
        "",
    ]


if __name__ == "__main__":
    print("\n".join(run()))
