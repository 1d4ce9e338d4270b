"""Shared fixtures for the vendor client tests: recorded sleeps, records, the sandbox server."""

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def sleeps() -> list[float]:
    """Waits the clients asked for, recorded instead of slept."""
    return []


@pytest.fixture
def make_deal() -> Callable[..., dict[str, Any]]:
    """A factory of raw EspoCRM Opportunity records, with ``**overrides``."""

    def make(number: int = 1, **overrides: Any) -> dict[str, Any]:
        record: dict[str, Any] = {
            "id": f"deal{number:05d}",
            "name": f"Deal {number}",
            "stage": "Proposal",
            "amount": 1000.0 + number,
            "amountCurrency": "EUR",
            "closeDate": "2026-12-31",
            "accountId": "acc1",
            "accountName": "ACME",
            "assignedUserId": "user1",
            "assignedUserName": "Ada",
            "createdAt": "2026-11-02 08:15:00",
            "modifiedAt": "2026-11-03 09:00:00",
        }
        record.update(overrides)
        return record

    return make


@pytest.fixture(scope="session")
def sandbox_server() -> Iterator[str]:
    """The sandbox app served by uvicorn on a free loopback port, in a background thread."""
    from followup_pipeline.sandbox.app import create_app
    from followup_pipeline.sandbox.config import SandboxConfig

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(SandboxConfig()),
        log_level="warning",
        ws="none",
        lifespan="auto",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the sandbox did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=5)
    sock.close()


@pytest.fixture
def sandbox(sandbox_server: str) -> str:
    """The sandbox's base URL, reset and without faults for each test."""
    with httpx.Client(base_url=sandbox_server, timeout=5) as control:
        control.post("/_sandbox/reset", json={}).raise_for_status()
        control.delete("/_sandbox/faults").raise_for_status()
    return sandbox_server
