"""Fixtures for the ingress: its settings, signed bodies, and the app served by real uvicorn."""

from __future__ import annotations

import base64
import contextlib
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from followup_pipeline.ingress import create_app
from followup_pipeline.sandbox import SandboxConfig, env_lines, sandbox_state
from followup_pipeline.sandbox import create_app as create_sandbox
from followup_pipeline.sandbox.state import SandboxState
from followup_pipeline.sandbox.webhooks import php_json, signatures
from followup_pipeline.settings import Settings, load_settings
from followup_pipeline_tests.support import served

STAGE_HOOK = ("6650a1b2c3d4e5f02", "Opportunity.fieldUpdate.stage", "stage-secret")
CREATE_HOOK = ("6650a1b2c3d4e5f00", "Opportunity.create", "create-secret")
DELETE_HOOK = ("6650a1b2c3d4e5f03", "Opportunity.delete", "delete-secret")
FORM_SECRET = "whsec_" + base64.b64encode(b"form-secret-of-32-bytes-length!!").decode()
OLD_FORM_SECRET = "whsec_" + base64.b64encode(b"an-older-form-secret-in-rotation").decode()


def ingress_settings(**overrides: Any) -> Settings:
    """Settings with three EspoCRM webhooks and one Standard Webhooks source (``forms``)."""
    hooks = [
        {"id": hook_id, "event": event, "secret": secret}
        for hook_id, event, secret in (STAGE_HOOK, CREATE_HOOK, DELETE_HOOK)
    ]
    values: dict[str, Any] = {
        "espocrm_webhooks": hooks,
        "standard_webhooks": {"forms": [FORM_SECRET, OLD_FORM_SECRET]},
        "espocrm_url": "http://127.0.0.1:9/espocrm",
    }
    values.update(overrides)
    return load_settings(**values)


def espocrm_delivery(
    items: list[dict[str, Any]], hook: tuple[str, str, str] = STAGE_HOOK
) -> tuple[bytes, dict[str, str]]:
    """A PHP-encoded body and the headers EspoCRM sends with it (both signatures)."""
    body = php_json(items)
    current, legacy = signatures(hook[0], body, hook[2])
    return body, {"Content-Type": "application/json", "Signature": current, "X-Signature": legacy}


IngressFactory = Callable[..., contextlib.AbstractContextManager[httpx.Client]]


@pytest.fixture
def make_ingress(db_url: str) -> IngressFactory:
    """``with make_ingress(url=..., **settings) as client``: a served ingress and a client."""

    @contextlib.contextmanager
    def build(url: str | None = None, **overrides: Any) -> Iterator[httpx.Client]:
        kwargs = overrides.pop("app_kwargs", {})
        app = create_app(ingress_settings(**overrides), url or db_url, **kwargs)
        with served(app) as base, httpx.Client(base_url=base, timeout=15) as client:
            yield client

    return build


@pytest.fixture
def ingress(make_ingress: IngressFactory) -> Iterator[httpx.Client]:
    """The ingress over the test's database, with the default test settings."""
    with make_ingress() as client:
        yield client


@dataclass
class Linked:
    """The sandbox as the site form's and the payment provider's sender, and the ingress."""

    sandbox: httpx.Client
    state: SandboxState
    ingress: httpx.Client


@pytest.fixture
def linked(db_url: str) -> Iterator[Linked]:
    """The sandbox sending its site forms and payments over real HTTP to an ingress over the
    test's database, configured from the sandbox's own env lines. The ingress's clock is the
    sandbox's (its ``now`` seam): moving the sandbox's clock moves both, as days passing would.
    The senders' job is slowed down: the control API makes each attempt."""
    config = SandboxConfig(sender_tick_s=3600)
    sandbox_app = create_sandbox(config)
    state = sandbox_state(sandbox_app)
    lines = dict(shlex.split(line)[0].split("=", 1) for line in env_lines(config, "http://x"))
    settings = ingress_settings(
        standard_webhooks=lines["FOLLOWUP_STANDARD_WEBHOOKS"],
        stripe_webhooks=lines["FOLLOWUP_STRIPE_WEBHOOKS"],
    )
    app = create_app(settings, db_url, now=lambda: state.clock.now().timestamp())
    with (
        served(app) as ingress_url,
        served(sandbox_app) as sandbox_url,
        httpx.Client(base_url=sandbox_url, timeout=30) as sandbox,
        httpx.Client(base_url=ingress_url, timeout=15) as ingress,
    ):
        target = {"url": f"{ingress_url}/webhooks/espocrm"}
        sandbox.post("/_sandbox/webhooks", json=target).raise_for_status()
        yield Linked(sandbox, state, ingress)
