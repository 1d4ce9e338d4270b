"""Fixtures for the sandbox tests: the app behind an ASGI client, and real loopback servers."""

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from followup_pipeline.sandbox import SandboxConfig, create_app, sandbox_state
from followup_pipeline.sandbox.state import SandboxState

ESPO = {"X-Api-Key": "sandbox-espocrm-key"}
CLICKUP = {"Authorization": "pk_sandbox_0000000_SANDBOXTOKEN"}
MISTRAL = {"Authorization": "Bearer sandbox-mistral-key"}
LIST_URL = "/clickup/api/v2/list/sandbox-list/task"


@pytest.fixture
def anyio_backend() -> str:
    """Run the async tests on asyncio only."""
    return "asyncio"


class Sandbox:
    """An app, its state and an async client bound to it."""

    def __init__(self, app: Starlette, client: httpx.AsyncClient) -> None:
        self.app = app
        self.client = client
        self.state: SandboxState = sandbox_state(app)

    async def deal(self, **attributes: Any) -> dict[str, Any]:
        """Seed one deal without webhooks; return it."""
        body = {"deals": [attributes], "emit_webhooks": False}
        response = await self.client.post("/_sandbox/deals", json=body)
        assert response.status_code == 201, response.text
        deal: dict[str, Any] = response.json()["deals"][0]
        return deal

    async def fault(self, **spec: Any) -> dict[str, Any]:
        """Inject a fault; return its description."""
        response = await self.client.post("/_sandbox/faults", json=spec)
        assert response.status_code == 201, response.text
        fault: dict[str, Any] = response.json()
        return fault


SandboxFactory = Callable[..., contextlib.AbstractAsyncContextManager[Sandbox]]


@pytest.fixture
def make_sandbox() -> SandboxFactory:
    """A factory: ``async with make_sandbox(**config) as sandbox`` (transport for webhooks)."""

    @contextlib.asynccontextmanager
    async def build(
        transport: httpx.AsyncBaseTransport | None = None, **config: Any
    ) -> AsyncIterator[Sandbox]:
        app = create_app(SandboxConfig(**config), webhook_transport=transport)
        asgi = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=asgi, base_url="http://sandbox") as client:
            yield Sandbox(app, client)

    return build


@pytest.fixture
async def sandbox(make_sandbox: SandboxFactory) -> AsyncIterator[Sandbox]:
    """A sandbox with the default configuration."""
    async with make_sandbox() as built:
        yield built
