"""The sandbox's ASGI app: the vendors under their own prefixes, their pages for people, plus
``/_sandbox``."""

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from followup_pipeline.sandbox import activity, persist
from followup_pipeline.sandbox.accredible import accredible_app
from followup_pipeline.sandbox.clickup import clickup_app, rate_limiter
from followup_pipeline.sandbox.companies import pdl_app
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.control import control_app
from followup_pipeline.sandbox.espocrm import espocrm_app
from followup_pipeline.sandbox.faults import DroppedAnswer
from followup_pipeline.sandbox.gate import VendorGate
from followup_pipeline.sandbox.graph import graph_app, login_app
from followup_pipeline.sandbox.mistral import mistral_app
from followup_pipeline.sandbox.moodle import moodle_gate
from followup_pipeline.sandbox.pages import page_routes
from followup_pipeline.sandbox.state import SandboxState

#: How often a changed world is written to the state file.
SAVE_EVERY_S = 3.0


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


async def _keep(state: SandboxState, path: Path) -> None:
    """Save the world every few seconds when it changed (and once more at shutdown)."""
    last = None
    while True:
        await asyncio.sleep(SAVE_EVERY_S)
        current = persist.snapshot(state)
        if current != last:
            try:
                persist.save(state, path)
            except OSError as error:  # a full disk: say so, and try again next time
                print(f"sandbox: cannot save {path}: {error}", flush=True)
                continue
            last = json.loads(json.dumps(current))  # a copy: the records change in place


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
    Besides the vendors' APIs it serves read-only pages of a deal and a task (``pages.py``).
    With ``config.state_file``, the world kept there is loaded (``app.state.kept`` says whether
    there was one) and saved while the app runs.

    The webhook queue job and the senders' job (site form, payments) run while the app's lifespan
    runs (uvicorn, ``TestClient`` used as a context manager); without it,
    ``POST /_sandbox/webhooks/flush`` sends the queue, and a form or payment sent through the
    control API makes its first attempt before the answer.
    """
    state = SandboxState(config or SandboxConfig())
    state.webhooks.transport = webhook_transport
    if state.config.state_file is not None:
        # Held for the process's life: a second sandbox on the same file refuses to start.
        state.lock_fd = persist.claim(state.config.state_file)
    kept = state.config.state_file is not None and persist.load(state, state.config.state_file)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        _quiet_drops()
        config = state.config
        jobs = [
            asyncio.create_task(state.webhooks.run()),
            asyncio.create_task(state.senders.run(config.sender_tick_s)),
        ]
        if config.demo_activity_s is not None:
            jobs.append(
                asyncio.create_task(
                    activity.run(
                        state,
                        every_s=config.demo_activity_s,
                        first_s=config.demo_activity_first_s,
                        seed=config.seed,
                    )
                )
            )
        if config.state_file is not None:
            jobs.append(asyncio.create_task(_keep(state, config.state_file)))
        try:
            yield
        finally:
            for job in jobs:
                job.cancel()
            # One job's failure must not skip the others' stop, nor the last save.
            await asyncio.gather(*jobs, return_exceptions=True)
            if config.state_file is not None:
                try:
                    persist.save(state, config.state_file)
                except OSError as error:
                    print(f"sandbox: cannot save {config.state_file}: {error}", flush=True)

    app = Starlette(
        routes=[
            # Pages for people (a deal, a task) at the links of the mails, outside the gates.
            *page_routes(state),
            Mount("/espocrm", app=VendorGate(espocrm_app(state), "espocrm", state)),
            Mount(
                "/clickup/api",
                app=VendorGate(clickup_app(state), "clickup", state, rate_limiter(state)),
            ),
            Mount("/login", app=VendorGate(login_app(state), "graph", state)),
            Mount("/graph", app=VendorGate(graph_app(state), "graph", state)),
            Mount("/mistral", app=VendorGate(mistral_app(state), "mistral", state)),
            Mount("/pdl", app=VendorGate(pdl_app(state), "pdl", state)),
            Mount("/accredible", app=VendorGate(accredible_app(state), "accredible", state)),
            # A Moodle site per tenant: /moodle/{site}/webservice/rest/server.php
            Mount("/moodle", app=moodle_gate(state)),
            Mount("/_sandbox", app=control_app(state)),
        ],
        lifespan=lifespan,
    )
    app.state.sandbox = state
    app.state.kept = kept
    return app
