"""The ingress: storing a signed webhook before answering, against GET /healthz (one SELECT 1
on the same server), both over real HTTP to a ``followup ingress`` process."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import database
from followup_pipeline.sandbox.webhooks import php_json, signatures

REQUESTS = 300
HOOK = ("6650a1b2c3d4e5f02", "Opportunity.fieldUpdate.stage", "bench-secret")


def _latencies(client: httpx.Client, send: Any) -> list[float]:
    samples = []
    for n in range(REQUESTS):
        start = time.perf_counter()
        answer = send(client, n)
        samples.append(time.perf_counter() - start)
        assert answer.status_code == 200, answer.text
    return samples


def _post(client: httpx.Client, n: int, *, same: bool = False) -> httpx.Response:
    body = php_json([{"id": "bench" if same else f"deal-{n}", "stage": "Proposal"}])
    current, legacy = signatures(HOOK[0], body, HOOK[2])
    headers = {"Content-Type": "application/json", "Signature": current, "X-Signature": legacy}
    return client.post("/webhooks/espocrm", content=body, headers=headers)


def run() -> list[dict[str, Any]]:
    """Rows of the benchmark table (median and 95th percentile per request)."""
    with database() as db_url:
        port = _free_port()
        env = {
            **os.environ,
            "FOLLOWUP_DATABASE_URL": db_url,
            "FOLLOWUP_ESPOCRM_WEBHOOKS": json.dumps(
                [{"id": HOOK[0], "event": HOOK[1], "secret": HOOK[2]}]
            ),
        }
        command = [str(Path(sys.executable).with_name("followup")), "ingress", "--port", str(port)]
        server = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, timeout=10) as client:
                _wait(client)
                health = _latencies(client, lambda c, n: c.get("/healthz"))
                stored = _latencies(client, _post)
                duplicate = _latencies(client, lambda c, n: _post(c, n, same=True))
        finally:
            server.terminate()
            server.wait(timeout=30)
    baseline = statistics.median(health)
    rows = [
        ("GET /healthz, one SELECT 1 (baseline)", health),
        ("POST a signed webhook: verify, store, commit, answer", stored),
        ("POST the same body again: a counted duplicate", duplicate),
    ]
    return [
        {
            "benchmark": f"{name} — p95 {_p95(samples) * 1000:.1f} ms",
            "seconds": statistics.median(samples),
            "ratio": statistics.median(samples) / baseline,
        }
        for name, samples in rows
    ]


def _p95(samples: list[float]) -> float:
    return sorted(samples)[int(len(samples) * 0.95) - 1]


def _wait(client: httpx.Client) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if client.get("/healthz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the ingress did not start")


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
