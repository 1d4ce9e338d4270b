"""The EspoCRM double: auth, list search, paging, maxSize, 404s, activity and metadata."""

import base64
import hashlib
import hmac
import json
from typing import Any

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


async def test_espocrm_list_keyset_pages_answer_as_a_full_scan_does(sandbox: Sandbox) -> None:
    """Pages by ``id`` after the last one read (the index path the sandbox takes with
    ``X-No-Total``) hold exactly what a scan of every record orders and filters."""
    for index, stage in enumerate(["Proposal", "Closed Won", "Negotiation"] * 9):
        await sandbox.deal(name=f"D{index:02}", stage=stage)
    where = {
        "where[0][type]": "in",
        "where[0][attribute]": "stage",
        "where[0][value][]": ["Proposal", "Negotiation"],
    }
    params = {"select": "id,stage", "orderBy": "id", "order": "asc", "maxSize": "5", **where}
    scanned = await sandbox.client.get(URL, params={**params, "maxSize": "200"}, headers=ESPO)
    everything = scanned.json()["list"]
    assert len(everything) == 18
    paged: list[dict[str, Any]] = []
    totals = []
    after: dict[str, str] = {}
    while True:
        headers = {**ESPO, "X-No-Total": "true"}
        answer = (await sandbox.client.get(URL, params={**params, **after}, headers=headers)).json()
        paged += answer["list"]
        totals.append(answer["total"])
        if answer["total"] == -2:
            break
        last = answer["list"][-1]["id"]
        after = {
            "where[1][type]": "greaterThan",
            "where[1][attribute]": "id",
            "where[1][value]": last,
        }
    assert paged == everything
    assert totals == [-1, -1, -1, -2]
    await sandbox.client.delete(f"/_sandbox/deals/{everything[0]['id']}")
    headers = {**ESPO, "X-No-Total": "true"}
    again = await sandbox.client.get(URL, params={**params, "maxSize": "200"}, headers=headers)
    assert again.json()["list"] == everything[1:]  # the index follows a deleted record


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


# The list parameters below are read as EspoCRM's Core/Record/SearchParamsFetcher.php reads them
# (fetchRawMultipleParams: `whereGroup ?? where`, `attributeSelect ?? select`, `orderBy` else
# legacy `sortBy`, `order` else legacy `asc`, `textFilter`, `q`, `primaryFilter`,
# `boolFilterList`; or one JSON `searchParams` instead of all of them).


async def _names(sandbox: Sandbox, params: dict[str, Any], url: str = URL) -> list[str]:
    """The names a listing answers, sorted."""
    response = await sandbox.client.get(url, params=params, headers=ESPO)
    assert response.status_code == 200, response.headers.get("X-Status-Reason")
    return sorted(row["name"] for row in response.json()["list"])


async def test_espocrm_list_where_group_is_honoured_and_wins_over_where(sandbox: Sandbox) -> None:
    for name, stage in (("A", "Proposal"), ("B", "Negotiation"), ("C", "Prospecting")):
        await sandbox.deal(name=name, stage=stage)
    group = {
        "whereGroup[0][type]": "in",
        "whereGroup[0][attribute]": "stage",
        "whereGroup[0][value][]": ["Proposal", "Negotiation"],
    }
    assert await _names(sandbox, group) == ["A", "B"]
    # Both given: `whereGroup ?? where` takes whereGroup, and `where` is not read at all.
    where = {"where[0][type]": "equals", "where[0][attribute]": "stage", "where[0][value]": "x"}
    assert await _names(sandbox, {**group, **where}) == ["A", "B"]
    bad = await sandbox.client.get(
        URL,
        params={"whereGroup[0][type]": "magic", "whereGroup[0][attribute]": "stage"},
        headers=ESPO,
    )
    assert bad.status_code == 400
    assert bad.headers["X-Status-Reason"] == "Unknown where item type 'magic'."


async def test_espocrm_list_attribute_select_is_honoured_and_wins_over_select(
    sandbox: Sandbox,
) -> None:
    await sandbox.deal(name="A", stage="Proposal")
    alias = await sandbox.client.get(URL, params={"attributeSelect": "name"}, headers=ESPO)
    assert [set(row) for row in alias.json()["list"]] == [{"id", "name"}]
    both = await sandbox.client.get(
        URL, params={"attributeSelect": "stage", "select": "name"}, headers=ESPO
    )
    assert [set(row) for row in both.json()["list"]] == [{"id", "stage"}]
    every = await sandbox.client.get(URL, params={"select": "*"}, headers=ESPO)
    assert "closeDate" in every.json()["list"][0]


async def test_espocrm_list_where_groups_nest_and_or_not(sandbox: Sandbox) -> None:
    deals = (("A", "Proposal", 100), ("B", "Proposal", 900), ("C", "Closed Lost", 0))
    for name, stage, amount in deals:
        await sandbox.deal(name=name, stage=stage, amount=amount)
    params = {
        "where[0][type]": "or",
        "where[0][value][0][type]": "equals",
        "where[0][value][0][attribute]": "stage",
        "where[0][value][0][value]": "Closed Lost",
        "where[0][value][1][type]": "greaterThan",
        "where[0][value][1][attribute]": "amount",
        "where[0][value][1][value]": "500",
    }
    assert await _names(sandbox, params) == ["B", "C"]
    negated = {
        "where[0][type]": "not",
        "where[0][value][0][type]": "equals",
        "where[0][value][0][attribute]": "stage",
        "where[0][value][0][value]": "Proposal",
    }
    assert await _names(sandbox, negated) == ["C"]
    between = {
        "where[0][type]": "between",
        "where[0][attribute]": "amount",
        "where[0][value][]": ["50", "150"],
    }
    assert await _names(sandbox, between) == ["A"]


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"where[0][type]": "in", "where[0][attribute]": "stage", "where[0][value]": "x"}, "'in'"),
        ({"where[0][attribute]": "stage"}, "No 'type'"),
        ({"where[0][type]": "equals", "where[0][value]": "x"}, "No 'attribute'"),
        ({"where[0][type]": "today", "where[0][attribute]": "createdAt"}, "sandbox"),
    ],
)
async def test_espocrm_list_where_refuses_what_espocrm_refuses(
    sandbox: Sandbox, params: dict[str, str], reason: str
) -> None:
    response = await sandbox.client.get(URL, params=params, headers=ESPO)
    assert response.status_code == 400
    assert reason in response.headers["X-Status-Reason"]


async def test_espocrm_list_legacy_sort_by_and_asc(sandbox: Sandbox) -> None:
    for name, amount in (("A", 3), ("B", 1), ("C", 2)):
        await sandbox.deal(name=name, amount=amount)

    async def order(params: dict[str, str]) -> list[str]:
        listed = await sandbox.client.get(URL, params=params, headers=ESPO)
        return [row["name"] for row in listed.json()["list"]]

    assert await order({"sortBy": "amount", "asc": "true"}) == ["B", "C", "A"]
    assert await order({"sortBy": "amount", "asc": "false"}) == ["A", "C", "B"]
    # orderBy and order win over their legacy names.
    assert await order({"orderBy": "name", "sortBy": "amount", "order": "asc", "asc": "false"}) == [
        "A",
        "B",
        "C",
    ]


async def test_espocrm_list_primary_filters_of_the_entity(sandbox: Sandbox) -> None:
    for name, stage in (("A", "Proposal"), ("W", "Closed Won"), ("L", "Closed Lost")):
        await sandbox.deal(name=name, stage=stage)
    assert await _names(sandbox, {"primaryFilter": "open"}) == ["A"]
    assert await _names(sandbox, {"primaryFilter": "won"}) == ["W"]
    assert await _names(sandbox, {"primaryFilter": "lost"}) == ["L"]
    assert await _names(sandbox, {"primaryFilter": "all"}) == ["A", "L", "W"]
    assert await _names(sandbox, {"primaryFilter": "followed"}) == []
    unknown = await sandbox.client.get(URL, params={"primaryFilter": "planned"}, headers=ESPO)
    assert unknown.status_code == 400
    assert unknown.headers["X-Status-Reason"] == "No primary filter 'planned' for 'Opportunity'."
    deal = await sandbox.deal(
        name="D",
        calls=[
            {"name": "done", "status": "Held", "dateStart": "2026-03-04 10:00:00"},
            {"name": "later", "status": "Planned", "dateStart": "2026-03-09 10:00:00"},
        ],
    )
    calls = f"{URL}/{deal['id']}/calls"
    assert await _names(sandbox, {"primaryFilter": "planned"}, calls) == ["later"]
    assert await _names(sandbox, {"primaryFilter": "held"}, "/espocrm/api/v1/Call") == ["done"]
    await sandbox.client.post("/_sandbox/clock", json={"now": "2026-03-09T08:00:00+00:00"})
    assert await _names(sandbox, {"primaryFilter": "todays"}, calls) == ["later"]


async def test_espocrm_list_bool_filters_or_together_and_unknown_is_refused(
    sandbox: Sandbox,
) -> None:
    await sandbox.deal(name="Mine", assignedUserId="5f1a0c2b3d4e5f600")  # the API key's user
    await sandbox.deal(name="Theirs", assignedUserId="5f1a0c2b3d4e5f601")
    assert await _names(sandbox, {"boolFilterList[]": ["onlyMy"]}) == ["Mine"]
    assert await _names(sandbox, {"boolFilterList[]": ["onlyMy", "followed"]}) == ["Mine"]
    assert await _names(sandbox, {"boolFilterList": "onlyMy"}) == ["Mine"]  # (array) cast
    unknown = await sandbox.client.get(URL, params={"boolFilterList[]": "nope"}, headers=ESPO)
    assert unknown.status_code == 400
    assert unknown.headers["X-Status-Reason"] == "No bool filter 'nope' for 'Opportunity'."


async def test_espocrm_list_text_filter_and_q_search_the_name(sandbox: Sandbox) -> None:
    for name in ("Müller Rollout", "Schäfer Rollout", "Acme"):
        await sandbox.deal(name=name)
    assert await _names(sandbox, {"textFilter": "mül"}) == ["Müller Rollout"]  # a prefix
    assert await _names(sandbox, {"textFilter": "Rollout"}) == []  # not inside a varchar
    assert await _names(sandbox, {"textFilter": "*rollout"}) == [
        "Müller Rollout",
        "Schäfer Rollout",
    ]
    assert await _names(sandbox, {"q": " acme "}) == ["Acme"]  # q, trimmed
    assert await _names(sandbox, {"textFilter": "Acme", "q": "Müller"}) == ["Acme"]


async def test_espocrm_list_search_params_json_replaces_the_other_params(sandbox: Sandbox) -> None:
    for name, stage in (("A", "Proposal"), ("B", "Negotiation")):
        await sandbox.deal(name=name, stage=stage)
    search = {
        "where": [{"type": "equals", "attribute": "stage", "value": "Negotiation"}],
        "select": ["name"],
        "maxSize": 5,
    }
    # `select` and `where` outside searchParams are not read once it is given.
    params = {"searchParams": json.dumps(search), "select": "stage", "where[0][type]": "magic"}
    listed = await sandbox.client.get(URL, params=params, headers=ESPO)
    assert listed.json() == {
        "total": 1,
        "list": [{"id": listed.json()["list"][0]["id"], "name": "B"}],
    }
    for bad, status in (("{", 400), (json.dumps({"maxSize": "5"}), 400), ('{"maxSize": 201}', 403)):
        answer = await sandbox.client.get(URL, params={"searchParams": bad}, headers=ESPO)
        assert answer.status_code == status


async def test_espocrm_list_reads_no_other_param_and_pages_200_by_default(
    sandbox: Sandbox,
) -> None:
    for index in range(205):
        await sandbox.deal(name=f"D{index:03}")
    # EspoCRM reads only the parameters named in SearchParamsFetcher::fetchRawMultipleParams;
    # `filterList` is read there but SearchParams::fromRaw keeps no such key; anything else
    # (here `foo`) is never looked at. Neither changes the answer.
    plain = (await sandbox.client.get(URL, headers=ESPO)).json()
    ignored = {"foo": "bar", "filterList[]": "x"}
    assert (await sandbox.client.get(URL, params=ignored, headers=ESPO)).json() == plain
    # handleMaxSize: without maxSize, a page is recordListMaxSizeLimit (200) long.
    assert (plain["total"], len(plain["list"])) == (205, 200)


async def test_espocrm_seeded_deal_has_a_close_date(sandbox: Sandbox) -> None:
    await sandbox.client.post("/_sandbox/clock", json={"now": "2026-03-02T08:00:00+00:00"})
    bare = await sandbox.deal(name="No date given")
    # closeDate is required in EspoCRM's Opportunity entityDefs: every deal has one.
    assert bare["closeDate"] == "2026-04-01"
    given = await sandbox.deal(name="Given", closeDate="2026-12-01")
    assert given["closeDate"] == "2026-12-01"
    listed = await sandbox.client.get(URL, params={"select": "closeDate"}, headers=ESPO)
    assert all(row["closeDate"] for row in listed.json()["list"])
    bad = await sandbox.client.post(
        "/_sandbox/deals", json={"deals": [{"closeDate": "01.12.2026"}], "emit_webhooks": False}
    )
    assert bad.status_code == 400


async def test_espocrm_seeded_calls_have_direction_and_date_end(sandbox: Sandbox) -> None:
    deal = await sandbox.deal(
        calls=[
            {"name": "Plain", "dateStart": "2026-03-04 10:00:00"},
            {
                "name": "In",
                "direction": "Inbound",
                "dateStart": "2026-03-04 11:00:00",
                "duration": 900,
            },
            {"name": "Ended", "dateStart": "2026-03-04 12:00:00", "dateEnd": "2026-03-04 12:20:00"},
        ],
        meetings=[{"name": "Meet", "dateStart": "2026-03-09 10:00:00"}],
    )
    calls = (await sandbox.client.get(f"{URL}/{deal['id']}/calls", headers=ESPO)).json()["list"]
    by_name = {call["name"]: call for call in calls}
    # Call.direction's default is Outbound; dateEnd is required and after dateStart; duration
    # is not stored but dateEnd - dateStart (5 minutes by default for a call, 1 hour a meeting).
    assert (by_name["Plain"]["direction"], by_name["Plain"]["dateEnd"]) == (
        "Outbound",
        "2026-03-04 10:05:00",
    )
    assert (by_name["In"]["direction"], by_name["In"]["dateEnd"]) == (
        "Inbound",
        "2026-03-04 11:15:00",
    )
    assert (by_name["Ended"]["duration"], by_name["Ended"]["dateEnd"]) == (
        1200,
        "2026-03-04 12:20:00",
    )
    meetings = await sandbox.client.get(f"{URL}/{deal['id']}/meetings", headers=ESPO)
    assert meetings.json()["list"][0]["dateEnd"] == "2026-03-09 11:00:00"
    for call in (
        {"direction": "Sideways"},
        {"dateStart": "2026-03-04 10:00:00", "dateEnd": "2026-03-04 09:00:00"},
        {"dateStart": "tomorrow"},
    ):
        refused = await sandbox.client.post(f"/_sandbox/deals/{deal['id']}/calls", json=call)
        assert refused.status_code == 400, call
