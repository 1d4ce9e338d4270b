"""The EspoCRM double: auth, list search, paging, maxSize, 404s, activity and metadata."""

import base64
import hashlib
import hmac

import pytest

from followup_pipeline_tests.sandbox.conftest import ESPO, Sandbox

pytestmark = pytest.mark.anyio
URL = "/espocrm/api/v1/Opportunity"


def hmac_header(method: str, resource: str, key: str, secret: str) -> str:
    """EspoCRM's HMAC authorization header, written from its documentation."""
    digest = hmac.new(secret.encode(), f"{method} {resource}".encode(), hashlib.sha256).hexdigest()
    return base64.b64encode(f"{key}:{digest}".encode()).decode()


async def test_espocrm_auth_rejects_missing_or_wrong_key_with_empty_401(sandbox: Sandbox) -> None:
    for headers in ({}, {"X-Api-Key": "wrong"}):
        response = await sandbox.client.get(URL, headers=headers)
        assert response.status_code == 401
        assert response.content == b""


async def test_espocrm_auth_accepts_hmac_over_method_and_path(sandbox: Sandbox) -> None:
    deal = await sandbox.deal(name="A")
    good = hmac_header(
        "GET", f"/Opportunity/{deal['id']}", "sandbox-espocrm-key", "sandbox-espocrm-hmac-secret"
    )
    response = await sandbox.client.get(
        f"{URL}/{deal['id']}?select=id", headers={"X-Hmac-Authorization": good}
    )
    assert response.status_code == 200
    bad = hmac_header("GET", "/Opportunity", "sandbox-espocrm-key", "sandbox-espocrm-hmac-secret")
    response = await sandbox.client.get(
        f"{URL}/{deal['id']}", headers={"X-Hmac-Authorization": bad}
    )
    assert response.status_code == 401


async def test_espocrm_list_pages_by_created_at_with_where_in(sandbox: Sandbox) -> None:
    stages = ["Proposal", "Negotiation", "Prospecting"] * 5
    for index, stage in enumerate(stages):
        sandbox.state.clock.advance(1)
        await sandbox.deal(name=f"D{index:02}", stage=stage, amount=1000 + index)
    params = {
        "select": "id,name,stage",
        "orderBy": "createdAt",
        "order": "asc",
        "maxSize": "4",
        "where[0][type]": "in",
        "where[0][attribute]": "stage",
        "where[0][value][]": ["Proposal", "Negotiation"],
    }
    names = []
    for offset in range(0, 12, 4):
        page = (
            await sandbox.client.get(URL, params={**params, "offset": offset}, headers=ESPO)
        ).json()
        assert page["total"] == 10
        assert all(set(row) == {"id", "name", "stage"} for row in page["list"])
        names += [row["name"] for row in page["list"]]
    assert names == [f"D{i:02}" for i, s in enumerate(stages) if s != "Prospecting"]


async def test_espocrm_list_where_equals_and_no_total_header(sandbox: Sandbox) -> None:
    for stage in ("Proposal", "Proposal", "Closed Won"):
        await sandbox.deal(stage=stage)
    params = {
        "where[0][type]": "equals",
        "where[0][attribute]": "stage",
        "where[0][value]": "Proposal",
        "maxSize": "1",
    }
    headers = {**ESPO, "X-No-Total": "true"}
    first = (await sandbox.client.get(URL, params=params, headers=headers)).json()
    last = (await sandbox.client.get(URL, params={**params, "offset": 1}, headers=headers)).json()
    assert (first["total"], len(first["list"])) == (-1, 1)
    assert (last["total"], len(last["list"])) == (-2, 1)


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"maxSize": "201"}, 403),
        ({"maxSize": "200"}, 200),
        ({"maxSize": "ten"}, 400),
        ({"offset": "-1"}, 400),
        ({"order": "sideways"}, 400),
        ({"orderBy": "nope"}, 400),
        ({"where[0][type]": "magic", "where[0][attribute]": "stage"}, 400),
    ],
)
async def test_espocrm_list_refuses_bad_params_with_reason(
    sandbox: Sandbox, params: dict[str, str], status: int
) -> None:
    response = await sandbox.client.get(URL, params=params, headers=ESPO)
    assert response.status_code == status
    if status != 200:
        assert response.content == b""
        assert response.headers["X-Status-Reason"]
    if status == 403:
        assert response.headers["X-Status-Reason"].startswith("Max size should not exceed 200")


async def test_espocrm_record_404_has_empty_body_and_reason(sandbox: Sandbox) -> None:
    response = await sandbox.client.get(f"{URL}/0123456789abcdef0", headers=ESPO)
    assert response.status_code == 404
    assert response.content == b""
    assert "not found" in response.headers["X-Status-Reason"]
    response = await sandbox.client.get("/espocrm/api/v1/Nothing/here/at/all", headers=ESPO)
    assert response.status_code == 404
    assert response.content == b""


async def test_espocrm_record_has_vendor_attributes_and_formats(sandbox: Sandbox) -> None:
    deal = await sandbox.deal(name="Ä", stage="Proposal", amount=5000, closeDate="2026-12-01")
    body = (await sandbox.client.get(f"{URL}/{deal['id']}", headers=ESPO)).json()
    for name in (
        "id",
        "name",
        "stage",
        "amount",
        "amountCurrency",
        "closeDate",
        "accountId",
        "accountName",
        "contactId",
        "contactName",
        "assignedUserId",
        "assignedUserName",
        "description",
        "createdAt",
        "modifiedAt",
    ):
        assert name in body
    assert len(body["id"]) == 17
    assert int(body["id"], 16) >= 0
    assert body["amount"] == 5000.0
    assert len(body["createdAt"]) == 19
    assert body["createdAt"][10] == " "


async def test_espocrm_links_list_emails_calls_and_meetings(sandbox: Sandbox) -> None:
    deal = await sandbox.deal(
        emails=[
            {"subject": "Angebot", "body": "Hallo", "dateSent": "2026-03-02 09:00:00"},
            {"subject": "Re: Angebot", "body": "Danke", "dateSent": "2026-03-03 09:00:00"},
        ],
        calls=[{"name": "Call", "status": "Held", "dateStart": "2026-03-04 10:00:00"}],
        meetings=[{"name": "Meet", "status": "Planned", "dateStart": "2026-03-09 10:00:00"}],
    )
    emails = (await sandbox.client.get(f"{URL}/{deal['id']}/emails", headers=ESPO)).json()
    assert emails["total"] == 2
    assert [e["subject"] for e in emails["list"]] == ["Re: Angebot", "Angebot"]
    assert emails["list"][0]["parentId"] == deal["id"]
    calls = (await sandbox.client.get(f"{URL}/{deal['id']}/calls", headers=ESPO)).json()
    meetings = (await sandbox.client.get(f"{URL}/{deal['id']}/meetings", headers=ESPO)).json()
    assert calls["list"][0]["status"] == "Held"
    assert meetings["list"][0]["status"] == "Planned"
    missing = await sandbox.client.get(f"{URL}/0123456789abcdef0/emails", headers=ESPO)
    assert missing.status_code == 404


async def test_espocrm_metadata_lists_the_stages(sandbox: Sandbox) -> None:
    key = "entityDefs.Opportunity.fields.stage.options"
    response = await sandbox.client.get(f"/espocrm/api/v1/Metadata?key={key}", headers=ESPO)
    assert response.json() == [
        "Prospecting",
        "Qualification",
        "Proposal",
        "Negotiation",
        "Closed Won",
        "Closed Lost",
    ]
