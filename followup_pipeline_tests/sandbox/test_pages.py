"""The sandbox's read-only pages at the links of the mails: a deal at the machine's CRM link, a
task at the ``url`` of the sandbox's ClickUp answer, served over real HTTP, everything escaped."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator

import httpx
import pytest

from followup_pipeline.sandbox import SandboxConfig, create_app
from followup_pipeline.settings import Settings
from followup_pipeline_tests.sandbox.conftest import CLICKUP, LIST_URL
from followup_pipeline_tests.support import served

HOSTILE = "<script>x</script>"
ESCAPED = "&lt;script&gt;x&lt;/script&gt;"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    """The sandbox served by uvicorn: its address."""
    with served(create_app(SandboxConfig())) as url:
        yield url


@pytest.fixture
def client(base: str) -> Iterator[httpx.Client]:
    """A client of the sandbox, its world reset."""
    with httpx.Client(base_url=base, timeout=10) as control:
        control.post("/_sandbox/reset", json={}).raise_for_status()
        yield control


def _deal(client: httpx.Client, **attributes: object) -> str:
    body = {"deals": [attributes], "emit_webhooks": False}
    answer = client.post("/_sandbox/deals", json=body)
    assert answer.status_code == 201, answer.text
    deal_id: str = answer.json()["deals"][0]["id"]
    return deal_id


def test_pages_a_deal_opens_at_the_machines_crm_link_escaped(
    base: str, client: httpx.Client
) -> None:
    hostile = _deal(client, name=HOSTILE, stage="Proposal", amount=12500, assignedUserName="Tom")
    _deal(client, name="Acme renewal", stage="Negotiation", description="line 1\n<b>line 2</b>")
    client.post(f"/_sandbox/deals/{hostile}/emails", json={"subject": "Angebot <i>x</i>"})
    link = Settings(espocrm_url=f"{base}/espocrm").crm_deal_url(hostile)
    assert link == f"{base}/espocrm/#Opportunity/view/{hostile}"

    app = httpx.get(link, timeout=10)  # (the fragment stays with the browser)
    assert app.status_code == 200
    assert app.headers["content-type"].startswith("text/html")
    assert f'href="#Opportunity/view/{hostile}"' in app.text
    assert ESCAPED in app.text
    assert HOSTILE not in app.text
    assert "12,500.00 EUR" in app.text
    assert "Acme renewal" in app.text
    assert httpx.get(f"{base}/espocrm", timeout=10).text == app.text
    # The page's own script (which shows the fragment's deal) is the one script it may run.
    [script] = re.findall(r"<script>(.*?)</script>", app.text, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in app.headers["content-security-policy"]
    assert 'data-pages="/espocrm/_page/Opportunity/"' in app.text

    page = client.get(f"/espocrm/_page/Opportunity/{hostile}")
    assert page.status_code == 200
    assert f"<h1>{ESCAPED}</h1>" in page.text
    assert HOSTILE not in page.text
    assert "Angebot &lt;i&gt;x&lt;/i&gt;" in page.text
    assert "Proposal" in page.text
    assert "script-src" not in page.headers["content-security-policy"]
    assert "<script" not in page.text
    missing = client.get("/espocrm/_page/Opportunity/nope")
    assert missing.status_code == 404
    assert "No opportunity nope" in missing.text
    # The CRM's API behind the same prefix is as it was: a key, or 401.
    assert client.get("/espocrm/api/v1/Opportunity").status_code == 401


def test_pages_a_task_opens_at_its_own_url_escaped(base: str, client: httpx.Client) -> None:
    body = {
        "name": f"Follow up: {HOSTILE}",
        "markdown_content": "**Next step:** call\n<img src=x onerror=alert(1)>",
        "assignees": [81001],
        "due_date": 1772445600000,
    }
    created = client.post(LIST_URL, json=body, headers=CLICKUP)
    assert created.status_code == 200, created.text
    task = created.json()
    assert task["url"] == f"{base}/clickup/t/{task['id']}"
    comment = {"comment_text": "Closed: <b>done</b>", "notify_all": False}
    client.post(f"/clickup/api/v2/task/{task['id']}/comment", json=comment, headers=CLICKUP)

    page = httpx.get(task["url"], timeout=10)
    assert page.status_code == 200
    assert f"Follow up: {ESCAPED}" in page.text
    assert HOSTILE not in page.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page.text
    assert "Sabine Vogel" in page.text  # the assignee by name
    assert "2026-03-02 10:00 UTC" in page.text  # the due date
    assert "to do" in page.text
    assert "Closed: &lt;b&gt;done&lt;/b&gt;" in page.text
    assert "<script" not in page.text
    missing = client.get("/clickup/t/86nosuchx")
    assert missing.status_code == 404
    assert "No task 86nosuchx" in missing.text
