"""ClickUp client against ``httpx.MockTransport``: keys, creates never retried, paging, limits."""

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from followup_pipeline.integrations.clickup import ClickUpClient, key_tag, task_is_gone
from followup_pipeline.integrations.errors import (
    IntegrationError,
    PermanentError,
    SchemaError,
    TransientError,
)

Handler = Callable[[httpx.Request], httpx.Response]
NOW = 1_800_000_000.0


def clickup(handler: Handler, sleeps: list[float], **kwargs: Any) -> ClickUpClient:
    return ClickUpClient(
        "http://clickup.test/api",
        "pk_123_SECRET",
        "list9",
        transport=httpx.MockTransport(handler),
        sleep=sleeps.append,
        clock=lambda: NOW,
        **kwargs,
    )


def task(task_id: str, *, tags: tuple[str, ...] = (), fields: list[Any] | None = None) -> Any:
    return {
        "id": task_id,
        "name": f"Follow up {task_id}",
        "status": {"status": "to do", "type": "open"},
        "date_created": "1764403200000",
        "due_date": None,
        "tags": [{"name": t} for t in tags],
        "custom_fields": fields or [],
        "url": f"https://app.clickup.com/t/{task_id}",
    }


def test_key_tag_is_sha1_prefix() -> None:
    expected = "fu-" + hashlib.sha1(b"task:7:1", usedforsecurity=False).hexdigest()[:12]
    assert key_tag("task:7:1") == expected
    assert len(key_tag("x")) == 15


def test_create_task_carries_key_as_tag(sleeps: list[float]) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=task("t1", tags=(key_tag("k1"),)))

    due = datetime(2026, 12, 1, 9, tzinfo=UTC)
    created = clickup(handler, sleeps).create_task(
        name="Call ACME", markdown="**hi**", due_date=due, assignees=[5], idempotency_key="k1"
    )
    request = sent[0]
    assert request.url.path == "/api/v2/list/list9/task"
    assert request.headers["Authorization"] == "pk_123_SECRET"
    body = json.loads(request.content)
    assert body["markdown_content"] == "**hi**"
    assert body["tags"] == [key_tag("k1")]
    assert body["due_date"] == int(due.timestamp() * 1000)
    assert created.status == "to do"
    assert created.tags == [key_tag("k1")]
    assert created.date_created == datetime(2025, 11, 29, 8, tzinfo=UTC)


def test_create_task_carries_key_in_custom_field(sleeps: list[float]) -> None:
    sent: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=task("t1"))

    clickup(handler, sleeps, key_field_id="cf1").create_task(
        name="n", markdown="m", due_date=None, assignees=[], idempotency_key="k1", tags=["x"]
    )
    assert sent[0]["custom_fields"] == [{"id": "cf1", "value": "k1"}]
    assert sent[0]["tags"] == ["x"]


@pytest.mark.parametrize(
    ("answer", "ambiguous"),
    [
        (httpx.ReadTimeout("slow"), True),
        # A 5xx or 429 to a create may have done it (docs/vendors.md): ambiguous, settled by search.
        (httpx.Response(500, text="<html>oops</html>"), True),
        (httpx.Response(503, json={"err": "Unavailable", "ECODE": "APP_503"}), True),
        (httpx.Response(429, headers={"X-RateLimit-Reset": str(int(NOW + 10))}), True),
        (httpx.ConnectError("refused"), False),  # never left: nothing can have happened
    ],
)
def test_create_task_is_never_retried(
    sleeps: list[float], answer: httpx.Response | Exception, ambiguous: bool
) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with pytest.raises(TransientError) as caught:
        clickup(handler, sleeps).create_task(
            name="n", markdown="m", due_date=None, assignees=[], idempotency_key="k"
        )
    assert len(calls) == 1
    assert sleeps == []
    assert caught.value.ambiguous is ambiguous


def test_find_tasks_by_key_pages_until_last_page(sleeps: list[float]) -> None:
    tag = key_tag("k1")
    pages: list[httpx.QueryParams] = []

    def handler(request: httpx.Request) -> httpx.Response:
        pages.append(request.url.params)
        page = int(request.url.params["page"])
        tasks = [task(f"p{page}", tags=(tag,)), task(f"other{page}")]
        return httpx.Response(200, json={"tasks": tasks, "last_page": page == 2})

    found = clickup(handler, sleeps).find_tasks_by_key(idempotency_key="k1")
    assert [t.id for t in found] == ["p0", "p1", "p2"]
    assert [p["page"] for p in pages] == ["0", "1", "2"]
    assert all(p["include_closed"] == "true" and p["tags[]"] == tag for p in pages)


def test_find_tasks_by_key_filters_on_custom_field(sleeps: list[float]) -> None:
    seen: list[httpx.QueryParams] = []
    field = [{"id": "cf1", "name": "key", "type": "short_text", "value": "k1"}]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params)
        return httpx.Response(200, json={"tasks": [task("t1", fields=field)], "last_page": True})

    found = clickup(handler, sleeps, key_field_id="cf1").find_tasks_by_key(idempotency_key="k1")
    assert [t.id for t in found] == ["t1"]
    condition = {"field_id": "cf1", "operator": "==", "value": "k1"}  # exact, not contains
    assert json.loads(seen[0]["custom_fields"]) == [condition]


def test_get_task_waits_for_rate_limit_reset(sleeps: list[float]) -> None:
    limited = httpx.Response(
        429,
        json={"err": "Rate limit reached", "ECODE": "APP_002"},
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW + 8))},
    )
    answers = iter([limited])

    def handler(request: httpx.Request) -> httpx.Response:
        return next(answers, httpx.Response(200, json=task("t1")))

    assert clickup(handler, sleeps).get_task(task_id="t1").id == "t1"
    assert sleeps == [8.0]


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (httpx.Response(401, json={"err": "Token invalid", "ECODE": "OAUTH_017"}), "OAUTH_017"),
        (httpx.Response(400, text="Bad Request"), "Bad Request"),
    ],
)
def test_errors_keep_the_vendor_message(
    sleeps: list[float], response: httpx.Response, message: str
) -> None:
    with pytest.raises(PermanentError) as caught:
        clickup(lambda _: response, sleeps).get_task(task_id="t1")
    assert message in caught.value.vendor_message
    assert "SECRET" not in str(caught.value)


def test_close_task_sets_status_then_comments(sleeps: list[float]) -> None:
    sent: list[tuple[str, str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append((request.method, request.url.path, json.loads(request.content)))
        if request.method == "PUT":
            return httpx.Response(200, json={**task("t1"), "status": {"status": "done"}})
        return httpx.Response(200, json={"id": "c1"})

    closed = clickup(handler, sleeps).close_task(
        task_id="t1", comment="Deal won", closed_status="done"
    )
    assert closed.status == "done"
    assert sent == [
        ("PUT", "/api/v2/task/t1", {"status": "done"}),
        ("POST", "/api/v2/task/t1/comment", {"comment_text": "Deal won", "notify_all": False}),
    ]


def test_close_task_uses_the_lists_closed_status(sleeps: list[float]) -> None:
    sent: list[tuple[str, str, Any]] = []
    statuses = [{"status": "Open", "type": "open"}, {"status": "Erledigt", "type": "closed"}]

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        sent.append((request.method, request.url.path, body))
        if request.url.path == "/api/v2/list/list9":
            return httpx.Response(200, json={"id": "list9", "statuses": statuses})
        if request.method == "PUT":
            return httpx.Response(200, json={**task("t1"), "status": {"status": "Erledigt"}})
        return httpx.Response(200, json={"id": "c1"})

    client = clickup(handler, sleeps)
    client.close_task(task_id="t1", comment="Deal won")
    client.close_task(task_id="t2", comment="Deal lost")
    assert [(m, p) for m, p, _ in sent if m == "GET"] == [("GET", "/api/v2/list/list9")]  # once
    assert [b for m, _, b in sent if m == "PUT"] == [{"status": "Erledigt"}] * 2


def test_get_task_broken_record_is_schema_error(sleeps: list[float]) -> None:
    broken = {**task("t1"), "date_created": None}
    with pytest.raises(SchemaError) as caught:
        clickup(lambda _: httpx.Response(200, json=broken), sleeps).get_task(task_id="t1")
    assert (caught.value.record_id, caught.value.field) == ("t1", "date_created")
    assert caught.value.raw == broken


@pytest.mark.parametrize(
    "body", [b'{"id": "t1", "name": "Fol', b"\xff\xfe not utf-8", b"[" * 100_000 + b"]" * 100_000]
)
def test_create_task_answer_that_is_not_json_is_an_ambiguous_error(
    sleeps: list[float], body: bytes
) -> None:
    client = clickup(lambda _: httpx.Response(200, content=body), sleeps)
    with pytest.raises(TransientError) as caught:
        client.create_task(
            name="n", markdown="m", due_date=None, assignees=[], idempotency_key="task:1:1"
        )
    assert caught.value.ambiguous
    assert "not JSON" in str(caught.value)


def test_get_task_answer_that_is_not_json_is_a_typed_error(sleeps: list[float]) -> None:
    client = clickup(lambda _: httpx.Response(200, content=b"<html>gateway</html>"), sleeps)
    with pytest.raises(TransientError) as caught:
        client.get_task(task_id="t1")
    assert not caught.value.ambiguous


@pytest.mark.parametrize(
    ("status", "body", "gone"),
    [
        (404, {"err": "Task not found, deleted", "ECODE": "ITEM_013"}, True),
        (401, {"err": "Task not found, deleted", "ECODE": "ITEM_013"}, True),
        (401, {"err": "Team not authorized", "ECODE": "OAUTH_027"}, True),
        (401, {"err": "Token invalid", "ECODE": "OAUTH_025"}, False),
        (500, {"err": "Internal", "ECODE": "APP_500"}, False),
    ],
)
def test_close_task_of_a_task_that_is_gone_is_told_apart(
    sleeps: list[float], status: int, body: dict[str, str], gone: bool
) -> None:
    client = clickup(lambda _: httpx.Response(status, json=body), sleeps, closed_status="done")
    with pytest.raises(IntegrationError) as caught:
        client.close_task(task_id="t1", comment="Deal won")
    assert task_is_gone(caught.value) is gone


def test_close_task_a_list_it_cannot_read_is_no_gone_task(sleeps: list[float]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"err": "Team not authorized", "ECODE": "OAUTH_027"})

    with pytest.raises(PermanentError) as caught:
        clickup(handler, sleeps).close_task(task_id="t1", comment="Deal won")
    assert "closed status of list list9" in str(caught.value)
    assert not task_is_gone(caught.value)
