"""Injected faults: every kind, their filters, their windows, and reproducibility by seed."""

import time

import httpx
import pytest

from followup_pipeline_tests.sandbox.conftest import (
    CLICKUP,
    ESPO,
    LIST_URL,
    Sandbox,
    SandboxFactory,
)
from followup_pipeline_tests.sandbox.test_graph import FORM, MAIL, SEND_URL, TOKEN_URL
from followup_pipeline_tests.support import served

pytestmark = pytest.mark.anyio
OPPS = "/espocrm/api/v1/Opportunity"


async def test_faults_error_answers_the_status_in_vendor_shape(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="espocrm", kind="error", status=503, count=1)
    await sandbox.fault(vendor="clickup", kind="error", status=500, count=1)
    espo = await sandbox.client.get(OPPS, headers=ESPO)
    assert (espo.status_code, espo.content) == (503, b"")
    assert espo.headers["X-Status-Reason"]
    clickup = await sandbox.client.get(LIST_URL, headers=CLICKUP)
    assert clickup.status_code == 500
    assert set(clickup.json()) == {"err", "ECODE"}
    assert "X-RateLimit-Remaining" in clickup.headers
    assert (await sandbox.client.get(OPPS, headers=ESPO)).status_code == 200


async def test_faults_error_rate_is_reproducible_by_seed(make_sandbox: SandboxFactory) -> None:
    runs = []
    for _ in range(2):
        async with make_sandbox(seed=7) as sandbox:
            await sandbox.fault(vendor="espocrm", kind="error", rate=0.5)
            codes = [(await sandbox.client.get(OPPS, headers=ESPO)).status_code for _ in range(30)]
            runs.append(codes)
    assert runs[0] == runs[1]
    assert set(runs[0]) == {200, 500}


async def test_faults_refuse_what_the_vendor_never_does(sandbox: Sandbox) -> None:
    for spec in (
        {"vendor": "espocrm", "kind": "rate_limit"},
        {"vendor": "espocrm", "kind": "error", "status": 502},
        {"vendor": "clickup", "kind": "invalid_output"},
        {"vendor": "webhooks", "kind": "error"},
    ):
        assert (await sandbox.client.post("/_sandbox/faults", json=spec)).status_code == 422


async def test_faults_outage_lasts_its_window(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="graph", kind="outage", seconds=0.2)
    during = await sandbox.client.post(TOKEN_URL, data=FORM)
    assert during.status_code == 503
    assert during.json()["error"]["code"] == "ServiceNotAvailable"
    time.sleep(0.25)
    assert (await sandbox.client.post(TOKEN_URL, data=FORM)).status_code == 200
    assert (await sandbox.client.get("/_sandbox/faults")).json()["faults"] == []


async def test_faults_latency_delays_the_answer(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="espocrm", kind="latency", latency_s=0.2, count=1)
    started = time.monotonic()
    assert (await sandbox.client.get(OPPS, headers=ESPO)).status_code == 200
    assert time.monotonic() - started >= 0.2


async def test_faults_malformed_truncates_the_body(sandbox: Sandbox) -> None:
    await sandbox.deal(name="A")
    await sandbox.fault(vendor="espocrm", kind="malformed", count=1)
    response = await sandbox.client.get(OPPS, headers=ESPO)
    assert response.status_code == 200
    with pytest.raises(ValueError, match=r"Expecting|Unterminated"):
        response.json()


async def test_faults_for_one_deal_only(sandbox: Sandbox) -> None:
    bad, good = await sandbox.deal(name="bad"), await sandbox.deal(name="good")
    await sandbox.fault(vendor="espocrm", kind="error", status=500, deal_id=bad["id"])
    assert (await sandbox.client.get(f"{OPPS}/{bad['id']}", headers=ESPO)).status_code == 500
    assert (await sandbox.client.get(f"{OPPS}/{good['id']}", headers=ESPO)).status_code == 200
    assert (await sandbox.client.get(f"{OPPS}/{bad['id']}/emails", headers=ESPO)).status_code == 500


async def test_faults_path_and_method_filters(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="clickup", kind="error", status=500, path=r"/task$", method="POST")
    assert (await sandbox.client.get(LIST_URL, headers=CLICKUP)).status_code == 200
    created = await sandbox.client.post(LIST_URL, json={"name": "x"}, headers=CLICKUP)
    assert created.status_code == 500


async def test_faults_clickup_rate_limit_burst(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="clickup", kind="rate_limit", count=3)
    codes = [(await sandbox.client.get(LIST_URL, headers=CLICKUP)).status_code for _ in range(4)]
    assert codes == [429, 429, 429, 200]


async def test_faults_graph_429_carries_retry_after(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="graph", kind="rate_limit", retry_after=7, count=1)
    response = await sandbox.client.post(TOKEN_URL, data=FORM)
    assert (response.status_code, response.headers["Retry-After"]) == (429, "7")


async def test_faults_clear_all_and_one(sandbox: Sandbox) -> None:
    first = await sandbox.fault(vendor="espocrm", kind="error")
    await sandbox.fault(vendor="mistral", kind="error")
    assert (await sandbox.client.delete(f"/_sandbox/faults/{first['id']}")).status_code == 200
    assert len((await sandbox.client.get("/_sandbox/faults")).json()["faults"]) == 1
    await sandbox.client.delete("/_sandbox/faults")
    assert (await sandbox.client.get("/_sandbox/faults")).json()["faults"] == []
    assert (await sandbox.client.get(OPPS, headers=ESPO)).status_code == 200


async def test_faults_drop_answer_commits_clickup_task_over_asgi(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="clickup", kind="drop_answer", method="POST", count=1)
    with pytest.raises(httpx.TransportError):
        await sandbox.client.post(LIST_URL, json={"name": "committed"}, headers=CLICKUP)
    tasks = (await sandbox.client.get("/_sandbox/clickup/tasks")).json()["tasks"]
    assert [task["name"] for task in tasks] == ["committed"]


async def test_faults_drop_answer_commits_graph_send_over_real_http(sandbox: Sandbox) -> None:
    with served(sandbox.app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            token = (await client.post(TOKEN_URL, data=FORM)).json()["access_token"]
            await client.post(
                "/_sandbox/faults",
                json={"vendor": "graph", "kind": "drop_answer", "path": "sendMail", "count": 1},
            )
            with pytest.raises(httpx.TransportError):
                await client.post(SEND_URL, json=MAIL, headers={"Authorization": f"Bearer {token}"})
            outbox = (await client.get("/_sandbox/outbox")).json()["messages"]
            again = await client.post(
                SEND_URL, json=MAIL, headers={"Authorization": f"Bearer {token}"}
            )
    assert len(outbox) == 1
    assert again.status_code == 202
