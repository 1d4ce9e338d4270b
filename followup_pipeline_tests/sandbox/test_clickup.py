"""The ClickUp double: auth, create, task shape, rate limit, paging, filters, update, comments."""

import json
import time

import pytest

from followup_pipeline_tests.sandbox.conftest import CLICKUP, LIST_URL, Sandbox, SandboxFactory

pytestmark = pytest.mark.anyio
KEY_FIELD = "4c1f0a3e-5b7d-4e2a-9f61-0d8c2b7a9e10"


async def test_clickup_auth_errors_are_json_with_ecode(sandbox: Sandbox) -> None:
    missing = await sandbox.client.get(LIST_URL)
    wrong = await sandbox.client.get(LIST_URL, headers={"Authorization": "pk_wrong"})
    assert (missing.status_code, missing.json()["ECODE"]) == (401, "OAUTH_017")
    assert wrong.status_code == 401
    assert set(wrong.json()) == {"err", "ECODE"}
    bearer = await sandbox.client.get(
        LIST_URL, headers={"Authorization": "Bearer pk_sandbox_0000000_SANDBOXTOKEN"}
    )
    assert bearer.status_code == 200


async def test_clickup_create_answers_200_with_the_task(sandbox: Sandbox) -> None:
    body = {
        "name": "Follow up",
        "description": "plain",
        "markdown_content": "**bold**",
        "tags": ["Fu-0123456789ab"],
        "assignees": [42],
        "priority": 2,
        "due_date": 1772445600000,
        "custom_fields": [{"id": KEY_FIELD, "value": "task:1:1"}],
    }
    response = await sandbox.client.post(LIST_URL, json=body, headers=CLICKUP)
    assert response.status_code == 200
    task = response.json()
    assert task["description"] == "**bold**"
    assert task["status"] == {
        "status": "to do",
        "color": "#d3d3d3",
        "type": "open",
        "orderindex": 0,
    }
    assert isinstance(task["date_created"], str)
    assert task["date_created"].isdigit()
    assert task["due_date"] == "1772445600000"
    assert task["tags"][0]["name"] == "fu-0123456789ab"
    assert task["custom_fields"][0]["value"] == "task:1:1"
    assert task["assignees"][0]["id"] == 42
    assert task["priority"]["priority"] == "high"
    assert task["list"]["id"] == "sandbox-list"
    assert task["url"] == f"http://sandbox/clickup/t/{task['id']}"  # its page on the sandbox
    fetched = await sandbox.client.get(f"/clickup/api/v2/task/{task['id']}", headers=CLICKUP)
    assert fetched.json() == task


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "x", "status": "nope"},
        {"name": "x", "priority": 9},
        {"name": "x", "custom_fields": [{"id": "unknown", "value": 1}]},
    ],
)
async def test_clickup_create_refuses_invalid_bodies(
    sandbox: Sandbox, body: dict[str, object]
) -> None:
    response = await sandbox.client.post(LIST_URL, json=body, headers=CLICKUP)
    assert response.status_code == 400
    assert set(response.json()) == {"err", "ECODE"}


async def test_clickup_rate_limit_429_after_100_requests_with_headers(
    make_sandbox: SandboxFactory,
) -> None:
    async with make_sandbox(clickup_rate_window_s=0.5) as sandbox:
        for n in range(100):
            response = await sandbox.client.get(LIST_URL, headers=CLICKUP)
            assert response.status_code == 200
            assert response.headers["X-RateLimit-Remaining"] == str(99 - n)
        limited = await sandbox.client.get(LIST_URL, headers=CLICKUP)
        assert limited.status_code == 429
        assert limited.headers["X-RateLimit-Limit"] == "100"
        assert limited.headers["X-RateLimit-Remaining"] == "0"
        assert int(limited.headers["X-RateLimit-Reset"]) >= int(time.time())
        assert "ECODE" in limited.json()
        time.sleep(0.55)
        assert (await sandbox.client.get(LIST_URL, headers=CLICKUP)).status_code == 200


async def test_clickup_list_pages_by_100_with_last_page(make_sandbox: SandboxFactory) -> None:
    async with make_sandbox(clickup_rate_limit=1000) as sandbox:
        for n in range(150):
            await sandbox.client.post(LIST_URL, json={"name": f"T{n}"}, headers=CLICKUP)
        first = (await sandbox.client.get(f"{LIST_URL}?page=0", headers=CLICKUP)).json()
        second = (await sandbox.client.get(f"{LIST_URL}?page=1", headers=CLICKUP)).json()
        assert (len(first["tasks"]), first["last_page"]) == (100, False)
        assert (len(second["tasks"]), second["last_page"]) == (50, True)
        ids = {t["id"] for t in first["tasks"]} | {t["id"] for t in second["tasks"]}
        assert len(ids) == 150


async def test_clickup_list_filters_custom_fields_tags_and_closed(sandbox: Sandbox) -> None:
    made = []
    for n in range(3):
        body = {
            "name": f"T{n}",
            "tags": [f"tag{n}"],
            "custom_fields": [{"id": KEY_FIELD, "value": f"key-{n}"}],
        }
        made.append((await sandbox.client.post(LIST_URL, json=body, headers=CLICKUP)).json())
    rule = json.dumps([{"field_id": KEY_FIELD, "operator": "=", "value": "key-1"}])
    found = (
        await sandbox.client.get(LIST_URL, params={"custom_fields": rule}, headers=CLICKUP)
    ).json()
    assert [t["id"] for t in found["tasks"]] == [made[1]["id"]]
    tagged = (await sandbox.client.get(LIST_URL, params={"tags[]": "TAG2"}, headers=CLICKUP)).json()
    assert [t["id"] for t in tagged["tasks"]] == [made[2]["id"]]
    task_url = f"/clickup/api/v2/task/{made[0]['id']}"
    # A new list has no status called "closed": its closed-type status is "complete".
    refused = await sandbox.client.put(task_url, json={"status": "closed"}, headers=CLICKUP)
    assert (refused.status_code, refused.json()["ECODE"]) == (400, "CRTSK_001")
    closed = await sandbox.client.put(task_url, json={"status": "complete"}, headers=CLICKUP)
    assert closed.json()["status"]["type"] == "closed"
    assert closed.json()["date_closed"] is not None
    open_only = (await sandbox.client.get(LIST_URL, headers=CLICKUP)).json()
    every = (await sandbox.client.get(f"{LIST_URL}?include_closed=true", headers=CLICKUP)).json()
    assert len(open_only["tasks"]) == 2
    assert len(every["tasks"]) == 3


async def test_clickup_comment_answers_id_hist_id_and_date(sandbox: Sandbox) -> None:
    task = (await sandbox.client.post(LIST_URL, json={"name": "T"}, headers=CLICKUP)).json()
    url = f"/clickup/api/v2/task/{task['id']}/comment"
    body = {"comment_text": "Deal won", "notify_all": False}
    response = await sandbox.client.post(url, json=body, headers=CLICKUP)
    assert response.status_code == 200
    assert set(response.json()) == {"id", "hist_id", "date"}
    assert isinstance(response.json()["date"], int)
    comments = (await sandbox.client.get(url, headers=CLICKUP)).json()["comments"]
    assert comments[0]["comment_text"] == "Deal won"
    missing = await sandbox.client.get("/clickup/api/v2/task/nope", headers=CLICKUP)
    assert (missing.status_code, missing.json()["ECODE"]) == (404, "ITEM_013")


async def test_clickup_custom_field_filter_equal_is_fuzzy_double_equal_is_exact(
    sandbox: Sandbox,
) -> None:
    made = []
    for key in ("task:1:1", "task:1:12", "TASK:1:1x"):
        body = {"name": key, "custom_fields": [{"id": KEY_FIELD, "value": key}]}
        made.append((await sandbox.client.post(LIST_URL, json=body, headers=CLICKUP)).json())

    async def found(operator: str) -> list[str]:
        rule = json.dumps([{"field_id": KEY_FIELD, "operator": operator, "value": "task:1:1"}])
        params = {"custom_fields": rule}
        answer = await sandbox.client.get(LIST_URL, params=params, headers=CLICKUP)
        return sorted(t["name"] for t in answer.json()["tasks"])

    assert await found("=") == ["TASK:1:1x", "task:1:1", "task:1:12"]
    assert await found("==") == ["task:1:1"]
    assert await found("!=") == []  # "does not contain"
    assert await found("!==") == ["TASK:1:1x", "task:1:12"]


async def test_clickup_list_has_the_statuses_of_a_new_list(sandbox: Sandbox) -> None:
    answer = await sandbox.client.get(LIST_URL.removesuffix("/task"), headers=CLICKUP)
    statuses = [(s["status"], s["type"]) for s in answer.json()["statuses"]]
    assert statuses == [("to do", "open"), ("complete", "closed")]


async def test_clickup_refuses_custom_fields_on_put_and_comments_without_notify_all(
    sandbox: Sandbox,
) -> None:
    task = (await sandbox.client.post(LIST_URL, json={"name": "T"}, headers=CLICKUP)).json()
    url = f"/clickup/api/v2/task/{task['id']}"
    body = {"custom_fields": [{"id": KEY_FIELD, "value": "x"}]}
    put = await sandbox.client.put(url, json=body, headers=CLICKUP)
    assert put.status_code == 400
    comment = await sandbox.client.post(
        f"{url}/comment", json={"comment_text": "x"}, headers=CLICKUP
    )
    assert comment.status_code == 400


async def test_clickup_comment_get_has_the_documented_fields(sandbox: Sandbox) -> None:
    task = (await sandbox.client.post(LIST_URL, json={"name": "T"}, headers=CLICKUP)).json()
    url = f"/clickup/api/v2/task/{task['id']}/comment"
    posted = await sandbox.client.post(
        url, json={"comment_text": "Deal won", "notify_all": False}, headers=CLICKUP
    )
    (comment,) = (await sandbox.client.get(url, headers=CLICKUP)).json()["comments"]
    # GET /v2/task/{id}/comment: id, comment (rich-text parts), comment_text, user, resolved,
    # assignee, assigned_by, reactions, date (a string of ms), reply_count.
    assert set(comment) == {
        "id",
        "comment",
        "comment_text",
        "user",
        "resolved",
        "assignee",
        "assigned_by",
        "reactions",
        "date",
        "reply_count",
    }
    assert comment["id"] == posted.json()["id"]
    assert comment["date"] == str(posted.json()["date"])
    assert comment["comment"] == [{"text": "Deal won"}]
    assert (comment["resolved"], comment["assignee"], comment["reactions"]) == (False, None, [])
    assert set(comment["user"]) >= {"id", "username", "email", "color", "initials"}


async def test_clickup_comment_honours_assignee_and_rich_text(sandbox: Sandbox) -> None:
    task = (await sandbox.client.post(LIST_URL, json={"name": "T"}, headers=CLICKUP)).json()
    url = f"/clickup/api/v2/task/{task['id']}/comment"
    body = {"comment": [{"text": "Bitte "}, {"text": "anrufen"}], "assignee": 183}
    posted = await sandbox.client.post(url, json={**body, "notify_all": True}, headers=CLICKUP)
    assert posted.status_code == 200
    (comment,) = (await sandbox.client.get(url, headers=CLICKUP)).json()["comments"]
    assert comment["comment_text"] == "Bitte anrufen"
    assert comment["assignee"]["id"] == 183
    assert comment["assigned_by"]["id"] == comment["user"]["id"]
    for bad in ({"assignee": "183"}, {"group_assignee": "g1"}):
        body = {"comment_text": "x", "notify_all": False, **bad}
        refused = await sandbox.client.post(url, json=body, headers=CLICKUP)
        assert refused.status_code == 400, bad


async def test_clickup_comments_page_25_newest_then_from_start_and_start_id(
    sandbox: Sandbox,
) -> None:
    task = (await sandbox.client.post(LIST_URL, json={"name": "T"}, headers=CLICKUP)).json()
    url = f"/clickup/api/v2/task/{task['id']}/comment"
    for number in range(30):
        sandbox.state.clock.advance(1)
        body = {"comment_text": f"c{number}", "notify_all": False}
        await sandbox.client.post(url, json=body, headers=CLICKUP)
    first = (await sandbox.client.get(url, headers=CLICKUP)).json()["comments"]
    assert [c["comment_text"] for c in first] == [f"c{n}" for n in range(29, 4, -1)]
    last = first[-1]
    params = {"start": last["date"], "start_id": last["id"]}
    rest = (await sandbox.client.get(url, params=params, headers=CLICKUP)).json()["comments"]
    assert [c["comment_text"] for c in rest] == ["c4", "c3", "c2", "c1", "c0"]
    bad = await sandbox.client.get(url, params={"start": "yesterday"}, headers=CLICKUP)
    assert bad.status_code == 400
