"""What the benchmarks share: an embedded Postgres, the sandbox over HTTP, a timer."""

from __future__ import annotations

import contextlib
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from followup_pipeline.integrations.resources import ClickUpResource, EspoCrmResource
from followup_pipeline.resources import ClockResource, PostgresResource, RunLockResource
from followup_pipeline.sandbox.app import create_app, sandbox_state
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.state import SandboxState
from followup_pipeline.settings import Settings, load_settings
from followup_pipeline.store.embedded import EmbeddedCluster
from followup_pipeline.store.migrate import migrate

#: ClickUp's real limit (100 requests a minute) would make the benchmark measure the wait.
SANDBOX = SandboxConfig(clickup_rate_limit=100_000)


def free_port() -> int:
    """A loopback port free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def timed(work: Callable[[], Any], repeat: int) -> float:
    """The median wall time of ``work`` in seconds over ``repeat`` runs."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


@contextlib.contextmanager
def database() -> Iterator[str]:
    """A migrated database on a throwaway embedded cluster."""
    with tempfile.TemporaryDirectory(prefix="followup-bench-") as home:
        cluster = EmbeddedCluster(Path(home))
        cluster.acquire()
        try:
            url = cluster.url("followup")
            migrate(url)
            yield url
        finally:
            cluster.release()


@contextlib.contextmanager
def sandbox() -> Iterator[str]:
    """The sandbox on a free loopback port."""
    with sandbox_with_state() as (base, _):
        yield base


@contextlib.contextmanager
def sandbox_with_state() -> Iterator[tuple[str, SandboxState]]:
    """The sandbox on a free loopback port, and its state (for a benchmark that seeds its
    records directly)."""
    app = create_app(SANDBOX)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="auto")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", sandbox_state(app)
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()


def sandbox_settings(base: str) -> Settings:
    """The machine's settings pointed at the sandbox served at ``base``."""
    return load_settings(espocrm_url=f"{base}/espocrm", clickup_url=f"{base}/clickup/api")


def evaluate_resources(db_url: str, base: str, now: str) -> dict[str, Any]:
    """The resources of an ``evaluate`` run against the sandbox, its clock set to ``now``."""
    postgres = PostgresResource(url=db_url)
    return {
        "postgres": postgres,
        "clock": ClockResource(start=now, ticking=False),
        "evaluate_lock": RunLockResource(postgres=postgres),
        "espocrm": EspoCrmResource(
            base_url=f"{base}/espocrm", api_key=SANDBOX.espocrm_api_key.get_secret_value()
        ),
        "clickup": ClickUpResource(
            base_url=f"{base}/clickup/api",
            token=SANDBOX.clickup_token.get_secret_value(),
            list_id=SANDBOX.clickup_list_id,
        ),
    }
