"""The EspoCRM double's activity listings across deals and its Lead, to docs/vendors.md."""

import pytest

from followup_pipeline_tests.sandbox.conftest import ESPO, Sandbox

pytestmark = pytest.mark.anyio
API = "/espocrm/api/v1"
SINCE = {
    "where[0][type]": "after",
    "where[0][attribute]": "dateSent",
    "where[0][value]": "2026-03-02 12:00:00",
    "where[1][type]": "equals",
    "where[1][attribute]": "parentType",
    "where[1][value]": "Opportunity",
}


async def test_leads_activity_since_a_moment_for_all_deals_in_one_listing(
    sandbox: Sandbox,
) -> None:
    first = await sandbox.deal(
        emails=[
            {"subject": "Old", "dateSent": "2026-03-02 09:00:00"},
            {"subject": "New A", "dateSent": "2026-03-03 09:00:00"},
        ]
    )
    second = await sandbox.deal(emails=[{"subject": "New B", "dateSent": "2026-03-04 09:00:00"}])
    answer = await sandbox.client.get(f"{API}/Email", params=SINCE, headers=ESPO)
    assert answer.status_code == 200
    listing = answer.json()
    assert listing["total"] == 2
    assert [(e["subject"], e["parentId"]) for e in listing["list"]] == [
        ("New B", second["id"]),
        ("New A", first["id"]),
    ]
    for entity in ("Call", "Meeting"):
        every = await sandbox.client.get(f"{API}/{entity}", headers=ESPO)
        assert every.json() == {"total": 0, "list": []}
    refused = await sandbox.client.get(f"{API}/Email")
    assert refused.status_code == 401


async def test_leads_create_read_update_and_list(sandbox: Sandbox) -> None:
    body = {"firstName": "Ada", "lastName": "Lovelace", "emailAddress": "ada@example.com"}
    created = await sandbox.client.post(f"{API}/Lead", json=body, headers=ESPO)
    assert created.status_code == 200
    lead = created.json()
    assert (lead["name"], lead["status"]) == ("Ada Lovelace", "New")
    read = await sandbox.client.get(f"{API}/Lead/{lead['id']}", headers=ESPO)
    assert read.json()["emailAddress"] == "ada@example.com"
    changed = await sandbox.client.put(
        f"{API}/Lead/{lead['id']}", json={"status": "In Process"}, headers=ESPO
    )
    assert changed.json()["status"] == "In Process"
    params = {"where[0][type]": "equals", "where[0][attribute]": "emailAddress"}
    params["where[0][value]"] = "ada@example.com"
    listed = await sandbox.client.get(f"{API}/Lead", params=params, headers=ESPO)
    assert [item["id"] for item in listed.json()["list"]] == [lead["id"]]
    missing = await sandbox.client.get(f"{API}/Lead/0123456789abcdef0", headers=ESPO)
    assert (missing.status_code, missing.content) == (404, b"")


async def test_leads_duplicate_check_answers_409_with_the_duplicates(sandbox: Sandbox) -> None:
    body = {"firstName": "Ada", "lastName": "Lovelace", "emailAddress": "ada@example.com"}
    first = (await sandbox.client.post(f"{API}/Lead", json=body, headers=ESPO)).json()
    again = {**body, "emailAddress": "ADA@example.com"}
    duplicate = await sandbox.client.post(f"{API}/Lead", json=again, headers=ESPO)
    assert duplicate.status_code == 409
    assert [item["id"] for item in duplicate.json()] == [first["id"]]
    skip = {**ESPO, "X-Skip-Duplicate-Check": "true"}
    forced = await sandbox.client.post(f"{API}/Lead", json=again, headers=skip)
    assert forced.status_code == 200
    wrong = await sandbox.client.post(
        f"{API}/Lead", json={"lastName": "X", "status": "Hot"}, headers=ESPO
    )
    assert (wrong.status_code, wrong.headers["X-Status-Reason"]) == (
        400,
        "Bad value for status: 'Hot'.",
    )


async def test_leads_same_name_without_e_mail_is_a_duplicate_and_unknown_fields_are_ignored(
    sandbox: Sandbox,
) -> None:
    body = {"firstName": "Ada", "lastName": "Lovelace", "website": "https://example.com"}
    first = await sandbox.client.post(f"{API}/Lead", json=body, headers=ESPO)
    assert first.status_code == 200
    assert "website" not in first.json()
    again = await sandbox.client.post(
        f"{API}/Lead", json={"firstName": "ada", "lastName": "LOVELACE"}, headers=ESPO
    )
    assert (again.status_code, again.headers["X-Status-Reason"]) == (409, "duplicate")


async def test_leads_amount_in_a_listed_currency_is_kept_and_another_is_refused(
    sandbox: Sandbox,
) -> None:
    body = {"lastName": "Sato", "opportunityAmount": 5000, "opportunityAmountCurrency": "JPY"}
    kept = await sandbox.client.post(f"{API}/Lead", json=body, headers=ESPO)
    assert kept.status_code == 200
    lead = kept.json()
    assert (lead["opportunityAmount"], lead["opportunityAmountCurrency"]) == (5000, "JPY")
    # An amount without a currency gets the installation's default currency.
    plain = {"lastName": "Weber", "opportunityAmount": 49.0}
    defaulted = (await sandbox.client.post(f"{API}/Lead", json=plain, headers=ESPO)).json()
    assert defaulted["opportunityAmountCurrency"] == "EUR"
    # A currency outside the Currency List is EspoCRM's validation failure, on create and update.
    outside = {"lastName": "Berg", "opportunityAmount": 10, "opportunityAmountCurrency": "SEK"}
    refused = await sandbox.client.post(f"{API}/Lead", json=outside, headers=ESPO)
    changed = await sandbox.client.put(
        f"{API}/Lead/{lead['id']}", json={"opportunityAmountCurrency": "SEK"}, headers=ESPO
    )
    reason = "Field validation failure; entityType: Lead, field: opportunityAmount, type: "
    for answer in (refused, changed):
        assert (answer.status_code, answer.headers["X-Status-Reason"]) == (
            400,
            reason + "validCurrency.",
        )
        assert answer.json()["messageTranslation"]["data"]["type"] == "validCurrency"
    read = (await sandbox.client.get(f"{API}/Lead/{lead['id']}", headers=ESPO)).json()
    assert read["opportunityAmountCurrency"] == "JPY"
