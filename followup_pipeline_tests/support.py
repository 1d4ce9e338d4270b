"""Helpers the tests share: a free loopback port, serving an ASGI app, waiting for a condition."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import uvicorn


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def served(app: Any, *, log_level: str = "critical") -> Iterator[str]:
    """Serve an ASGI app with uvicorn (lifespan on) on a free loopback port; yield its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level=log_level, ws="none", lifespan="on", http="h11")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` every second until it returns something true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, KeyError, TypeError):
            last = None
        if last:
            return last
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")


def registering(conn: Any, crm: Any, settings: Any) -> Any:
    """The engine's event worker with ``register``'s handler, as the ``register`` job runs it."""
    from followup_pipeline.defs.register.registrar import Registrar
    from followup_pipeline.engine.worker import EventWorker

    return EventWorker(conn, Registrar(conn, crm, settings), settings, sources=("espocrm",))
