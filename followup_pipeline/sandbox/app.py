"""The sandbox's ASGI app: the four vendors under their own prefixes, plus ``/_sandbox``."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from followup_pipeline.sandbox.clickup import clickup_app, rate_limiter
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.control import control_app
from followup_pipeline.sandbox.espocrm import espocrm_app
from followup_pipeline.sandbox.faults import DroppedAnswer
from followup_pipeline.sandbox.gate import VendorGate
from followup_pipeline.sandbox.graph import graph_app, login_app
from followup_pipeline.sandbox.mistral import mistral_app
from followup_pipeline.sandbox.state import SandboxState


class _QuietDrops(logging.Filter):
    """Turn the server's traceback for a deliberate ``drop_answer`` into one short line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], DroppedAnswer):
            record.msg, record.args, record.exc_info = "sandbox fault: answer dropped", (), None
        return True


def _quiet_drops() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietDrops) for f in logger.filters):
        logger.addFilter(_QuietDrops())


def sandbox_state(app: Starlette) -> SandboxState:
    """The state behind an app made by ``create_app`` (for tests and the demo loader)."""
    state: SandboxState = app.state.sandbox
    return state


def create_app(
    config: SandboxConfig | None = None,
    *,
    webhook_transport: httpx.AsyncBaseTransport | None = None,
) -> Starlette:
    """Build the sandbox app; ``webhook_transport`` (tests) replaces the network for webhooks.

    The webhook queue job runs while the app's lifespan runs (uvicorn, ``TestClient`` used as a
    context manager); without it, ``POST /_sandbox/webhooks/flush`` sends the queue.
    """
    state = SandboxState(config or SandboxConfig())
    state.webhooks.transport = webhook_transport

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        _quiet_drops()
        job = asyncio.create_task(state.webhooks.run())
        try:
            yield
        finally:
            job.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job

    app = Starlette(
        routes=[
            Mount("/espocrm", app=VendorGate(espocrm_app(state), "espocrm", state)),
            Mount(
                "/clickup/api",
                app=VendorGate(clickup_app(state), "clickup", state, rate_limiter(state)),
            ),
            Mount("/login", app=VendorGate(login_app(state), "graph", state)),
            Mount("/graph", app=VendorGate(graph_app(state), "graph", state)),
            Mount("/mistral", app=VendorGate(mistral_app(state), "mistral", state)),
            Mount("/_sandbox", app=control_app(state)),
        ],
        lifespan=lifespan,
    )
    app.state.sandbox = state
    return app
