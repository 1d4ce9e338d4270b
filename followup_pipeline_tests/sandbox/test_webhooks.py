"""EspoCRM webhooks from the sandbox: signatures on the wire, PHP encoding, batching, retries."""

import asyncio
import base64
import hashlib
import hmac
import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from followup_pipeline.sandbox.webhooks import php_json
from followup_pipeline_tests.sandbox.conftest import SandboxFactory
from followup_pipeline_tests.support import served

pytestmark = pytest.mark.anyio
HOOKS = [
    {"id": "aaaaaaaaaaaaaaaa1", "event": "Opportunity.fieldUpdate.stage", "secret": "s1"},
    {"id": "aaaaaaaaaaaaaaaa2", "event": "Opportunity.update", "secret": "s2"},
    {"id": "aaaaaaaaaaaaaaaa3", "event": "Opportunity.create", "secret": "s3"},
    {"id": "aaaaaaaaaaaaaaaa4", "event": "Opportunity.delete", "secret": "s4"},
]
SECRETS = {hook["id"]: hook["secret"] for hook in HOOKS}


def verify(headers: dict[str, str], body: bytes) -> str:
    """Check both EspoCRM signature headers over the raw bytes; return the webhook id."""
    decoded = base64.b64decode(headers["signature"])
    webhook_id, _, hex_digest = decoded.decode().partition(":")
    key = SECRETS[webhook_id].encode()
    assert hex_digest == hmac.new(key, body, hashlib.sha256).hexdigest()
    legacy = base64.b64decode(headers["x-signature"])
    assert legacy == webhook_id.encode() + b":" + hmac.new(key, body, hashlib.sha256).digest()
    return webhook_id


def receiver(received: list[tuple[dict[str, str], bytes]], statuses: list[int]) -> Starlette:
    """A tiny ingress that keeps exact bytes and answers the given statuses in turn."""

    async def hook(request: Request) -> Response:
        received.append((dict(request.headers), await request.body()))
        return Response(status_code=statuses.pop(0) if statuses else 200)

    return Starlette(routes=[Route("/hook", hook, methods=["POST"])])


def mock(statuses: list[int], seen: list[httpx.Request]) -> httpx.MockTransport:
    """A transport answering the statuses in turn (0 = connection refused, -1 = a timeout),
    then 200."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status = statuses.pop(0) if statuses else 200
        if status == 0:
            raise httpx.ConnectError("refused", request=request)
        if status == -1:
            raise httpx.ReadTimeout("no answer in time", request=request)
        return httpx.Response(status)

    return httpx.MockTransport(handle)


async def test_webhooks_are_signed_and_php_encoded_on_the_wire(
    make_sandbox: SandboxFactory,
) -> None:
    received: list[tuple[dict[str, str], bytes]] = []
    with served(receiver(received, [])) as url:
        async with make_sandbox(webhook_url=f"{url}/hook", webhooks=HOOKS) as sandbox:
            await sandbox.client.post(
                "/_sandbox/deals", json={"name": "Müller/Söhne", "id": "d" * 17}
            )
            await sandbox.client.post(
                f"/_sandbox/deals/{'d' * 17}/stage", json={"stage": "Proposal"}
            )
            await sandbox.client.delete(f"/_sandbox/deals/{'d' * 17}")
            results = (await sandbox.client.post("/_sandbox/webhooks/flush")).json()["deliveries"]
    assert [r["outcome"] for r in results] == ["success"] * 4
    by_id = {verify(headers, body): body for headers, body in received}
    assert set(by_id) == set(SECRETS)
    create = by_id["aaaaaaaaaaaaaaaa3"]
    assert b"M\\u00fcller\\/S\\u00f6hne" in create
    assert json.loads(create)[0]["name"] == "Müller/Söhne"
    assert json.loads(by_id["aaaaaaaaaaaaaaaa1"]) == [{"id": "d" * 17, "stage": "Proposal"}]
    update = json.loads(by_id["aaaaaaaaaaaaaaaa2"])[0]
    # The changed attributes and EspoCRM's side effects of a stage change; never modifiedAt.
    assert set(update) == {"id", "stage", "probability", "lastStage"}
    assert json.loads(by_id["aaaaaaaaaaaaaaaa4"]) == [{"id": "d" * 17}]
    assert all(h["content-type"] == "application/json" for h, _ in received)


async def test_webhooks_batch_at_most_50_items(make_sandbox: SandboxFactory) -> None:
    seen: list[httpx.Request] = []
    hooks = [HOOKS[2]]
    async with make_sandbox(
        mock([], seen), webhook_url="http://ingress/hook", webhooks=hooks
    ) as sb:
        await sb.client.post("/_sandbox/deals", json=[{"name": f"D{n}"} for n in range(120)])
        await sb.client.post("/_sandbox/webhooks/flush")
    assert [len(json.loads(r.content)) for r in seen] == [50, 50, 20]


@pytest.mark.parametrize(
    ("statuses", "attempts", "outcomes"),
    [
        ([503, 503, 503, 503], 4, ["retry"] * 4),
        # A refused connection fails the items at once; a timeout is a retried 408
        # (docs/vendors.md).
        ([0], 1, ["failed"]),
        ([-1, 500, 200], 3, ["retry", "retry", "success"]),
        ([401, 403, 404, 405], 4, ["retry"] * 4),
        ([408, 204], 2, ["retry", "success"]),
        ([400], 1, ["failed"]),
        ([429], 1, ["failed"]),
        ([502], 1, ["failed"]),
        ([504], 1, ["failed"]),
        ([302], 1, ["success"]),
    ],
)
async def test_webhooks_follow_espocrm_retry_rules(
    make_sandbox: SandboxFactory, statuses: list[int], attempts: int, outcomes: list[str]
) -> None:
    seen: list[httpx.Request] = []
    hooks = [HOOKS[3]]
    async with make_sandbox(
        mock(list(statuses), seen), webhook_url="http://i/h", webhooks=hooks
    ) as sb:
        await sb.deal(id="e" * 17)
        await sb.client.delete(f"/_sandbox/deals/{'e' * 17}")
        results = []
        for _ in range(6):
            results += (await sb.client.post("/_sandbox/webhooks/flush")).json()["deliveries"]
        state = (await sb.client.get("/_sandbox/webhooks")).json()
    assert len(seen) == attempts
    assert [r["outcome"] for r in results] == outcomes
    assert [r["attempt"] for r in results] == list(range(1, attempts + 1))
    assert state["queue"] == []


async def test_webhooks_410_deletes_the_webhook(make_sandbox: SandboxFactory) -> None:
    seen: list[httpx.Request] = []
    async with make_sandbox(mock([410], seen), webhook_url="http://i/h", webhooks=[HOOKS[2]]) as sb:
        await sb.client.post("/_sandbox/deals", json={"name": "A"})
        first = (await sb.client.post("/_sandbox/webhooks/flush")).json()["deliveries"]
        await sb.client.post("/_sandbox/deals", json={"name": "B"})
        second = (await sb.client.post("/_sandbox/webhooks/flush")).json()["deliveries"]
        state = (await sb.client.get("/_sandbox/webhooks")).json()
    assert first[0]["outcome"] == "deleted"
    assert second == []
    assert state["webhooks"] == []
    assert len(seen) == 1


async def test_webhooks_queue_job_sends_and_retries_on_its_own(
    make_sandbox: SandboxFactory,
) -> None:
    received: list[tuple[dict[str, str], bytes]] = []
    with served(receiver(received, [503])) as url:
        async with make_sandbox(
            webhook_url=f"{url}/hook",
            webhooks=[HOOKS[0]],
            webhook_queue_interval_s=0.05,
            webhook_retry_interval_s=0.1,
        ) as sandbox:
            with served(sandbox.app) as base:
                async with httpx.AsyncClient(base_url=base) as client:
                    await client.post("/_sandbox/deals", json={"id": "f" * 17, "name": "X"})
                    await client.post(
                        f"/_sandbox/deals/{'f' * 17}/stage", json={"stage": "Proposal"}
                    )
                    # Up to 10 s: on two busy cores the queue's 0.05 s ticks can lag.
                    for _ in range(500):
                        history = (await client.get("/_sandbox/webhooks")).json()["deliveries"]
                        if len(received) == 2 and len(history) == 2:
                            break
                        await asyncio.sleep(0.02)
    assert [entry["status"] for entry in history] == [503, 200]
    assert received[0][1] == received[1][1]


async def test_webhooks_drop_and_duplicate_faults(make_sandbox: SandboxFactory) -> None:
    seen: list[httpx.Request] = []
    async with make_sandbox(mock([], seen), webhook_url="http://i/h", webhooks=[HOOKS[0]]) as sb:
        for name in ("a", "b"):
            await sb.deal(id=name * 17)
        await sb.fault(vendor="webhooks", kind="drop", deal_id="a" * 17)
        await sb.fault(vendor="webhooks", kind="duplicate", deal_id="b" * 17, count=1)
        for name in ("a", "b"):
            await sb.client.post(f"/_sandbox/deals/{name * 17}/stage", json={"stage": "Proposal"})
        results = (await sb.client.post("/_sandbox/webhooks/flush")).json()["deliveries"]
        history = (await sb.client.get("/_sandbox/webhooks")).json()["deliveries"]
    assert [json.loads(r.content) for r in seen] == [[{"id": "b" * 17, "stage": "Proposal"}]] * 2
    assert len(results) == 2
    assert history[0]["outcome"] == "dropped"
    assert history[0]["ids"] == ["a" * 17]


async def test_webhooks_reorder_fault_sends_a_flush_newest_first(
    make_sandbox: SandboxFactory,
) -> None:
    seen: list[httpx.Request] = []
    async with make_sandbox(mock([], seen), webhook_url="http://i/h", webhooks=[HOOKS[0]]) as sb:
        for name in "abc":
            await sb.deal(id=name * 17)
        await sb.fault(vendor="webhooks", kind="reorder", count=1)
        for stage in ("Proposal", "Negotiation"):
            for name in "abc":
                await sb.client.post(f"/_sandbox/deals/{name * 17}/stage", json={"stage": stage})
            # The fault is spent after the first flush: the second keeps the queue's order.
            await sb.client.post("/_sandbox/webhooks/flush")
    first, second = ([item["id"][0] for item in json.loads(r.content)] for r in seen)
    assert first == ["c", "b", "a"]
    assert second == ["a", "b", "c"]


async def test_webhooks_configure_target_at_runtime(make_sandbox: SandboxFactory) -> None:
    seen: list[httpx.Request] = []
    async with make_sandbox(mock([], seen), webhooks=[HOOKS[2]]) as sb:
        await sb.client.post("/_sandbox/deals", json={"name": "A"})
        assert (await sb.client.post("/_sandbox/webhooks/flush")).json()["deliveries"] == []
        config: dict[str, Any] = {"url": "http://late/h", "webhooks": [HOOKS[2]]}
        assert (await sb.client.post("/_sandbox/webhooks", json=config)).json()[
            "url"
        ] == "http://late/h"
        assert len((await sb.client.post("/_sandbox/webhooks/flush")).json()["deliveries"]) == 1
    assert str(seen[0].url) == "http://late/h"


async def test_webhooks_queue_job_takes_a_portion_of_20_one_batch_per_webhook(
    make_sandbox: SandboxFactory,
) -> None:
    seen: list[httpx.Request] = []
    async with make_sandbox(
        mock([], seen), webhook_url="http://ingress/hook", webhooks=[HOOKS[2]]
    ) as sb:
        await sb.client.post("/_sandbox/deals", json=[{"name": f"D{n}"} for n in range(45)])
        queue = sb.app.state.sandbox.webhooks
        for _ in range(3):
            await queue.flush(only_due=True, portion=20)
    assert [len(json.loads(r.content)) for r in seen] == [20, 20, 5]


@pytest.mark.parametrize(
    ("number", "php"),
    [
        (1000.0, "1000"),
        (58750.0, "58750"),
        (1e20, "1.0e+20"),
        (1.5e20, "1.5e+20"),
        (1e14, "100000000000000"),
        (-1e15, "-1000000000000000"),
        (1e16, "10000000000000000"),
        (1e17, "1.0e+17"),
        (-0.0, "-0"),
        (0.1 + 0.2, "0.30000000000000004"),
        (0.0001, "0.0001"),
        (0.00001, "1.0e-5"),
        (123.45, "123.45"),
    ],
)
def test_webhooks_floats_are_written_as_php_writes_them(number: float, php: str) -> None:
    assert php_json([{"amount": number}]) == f'[{{"amount":{php}}}]'.encode()


@pytest.mark.parametrize(
    ("moves", "last_update"),
    [
        (["Proposal"], {"stage": "Proposal", "probability": 50, "lastStage": "Proposal"}),
        (["Proposal", "Closed Lost"], {"stage": "Closed Lost", "probability": 0}),
        (
            ["Closed Won", "Closed Lost"],
            {"stage": "Closed Lost", "probability": 0, "lastStage": "Negotiation"},
        ),
    ],
)
async def test_webhooks_update_carries_espocrms_side_effects(
    make_sandbox: SandboxFactory, moves: list[str], last_update: dict[str, Any]
) -> None:
    seen: list[httpx.Request] = []
    async with make_sandbox(mock([], seen), webhook_url="http://i/h", webhooks=[HOOKS[1]]) as sb:
        await sb.client.post("/_sandbox/deals", json={"id": "c" * 17, "stage": "Prospecting"})
        for stage in moves:
            await sb.client.post(f"/_sandbox/deals/{'c' * 17}/stage", json={"stage": stage})
        await sb.client.post("/_sandbox/webhooks/flush")
    updates = [item for request in seen for item in json.loads(request.content)]
    assert updates[-1] == {"id": "c" * 17, **last_update}
