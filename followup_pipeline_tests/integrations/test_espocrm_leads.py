"""EspoCRM's Leads changed since a moment (``list_leads_since``): the request against
``httpx.MockTransport``, and the whole listing against the sandbox over real HTTP, whose ``GET
/Lead`` answers as EspoCRM's does (docs/vendors.md, Leads)."""

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from followup_pipeline.integrations.errors import SchemaError
from followup_pipeline.integrations.espocrm import LEAD_FIELDS, PAGE_SIZE, EspoCrmClient
from followup_pipeline.sandbox.config import SandboxConfig

Handler = Callable[[httpx.Request], httpx.Response]
KEY = SandboxConfig().espocrm_api_key.get_secret_value()
ESPO = {"X-Api-Key": KEY}
#: 02:00 in Berlin on a winter night: 01:00 UTC, as EspoCRM compares datetimes.
SINCE = datetime(2026, 3, 2, 2, 0, tzinfo=ZoneInfo("Europe/Berlin"))


def raw_lead(number: int, **overrides: Any) -> dict[str, Any]:
    """A Lead as EspoCRM lists it with the client's ``select``."""
    record: dict[str, Any] = {
        "id": f"lead{number:05d}",
        "name": f"Ada {number}",
        "firstName": "Ada",
        "lastName": str(number),
        "emailAddress": f"ada{number}@example.test",
        "phoneNumber": "+49 30 1234567",
        "accountName": "ACME",
        "status": "New",
        "source": "Web Site",
        "description": "Asked for an offer.",
        "assignedUserId": "user1",
        "createdAt": "2026-03-01 08:00:00",
        "modifiedAt": "2026-03-02 09:30:00",
    }
    record.update(overrides)
    return record


def mocked(handler: Handler, sleeps: list[float]) -> EspoCrmClient:
    return EspoCrmClient(
        "http://crm.test/espocrm", KEY, transport=httpx.MockTransport(handler), sleep=sleeps.append
    )


def test_leads_since_asks_for_every_lead_modified_after_the_moment_by_created_at(
    sleeps: list[float],
) -> None:
    leads = [raw_lead(n) for n in range(450)]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        offset, size = int(request.url.params["offset"]), int(request.url.params["maxSize"])
        return httpx.Response(200, json={"total": 450, "list": leads[offset : offset + size]})

    listing = mocked(handler, sleeps).list_leads_since(since=SINCE)
    assert [lead.id for lead in listing.records] == [lead["id"] for lead in leads]
    assert listing.invalid == []
    assert {request.url.path for request in seen} == {"/espocrm/api/v1/Lead"}
    assert all(request.headers["X-Api-Key"] == KEY for request in seen)
    assert all("X-No-Total" not in request.headers for request in seen)  # the total pages it
    assert [request.url.params["offset"] for request in seen] == ["0", "200", "400"]
    params = dict(seen[0].url.params)
    del params["offset"]
    assert params == {
        "select": LEAD_FIELDS,
        "maxSize": str(PAGE_SIZE),
        "orderBy": "createdAt",
        "order": "asc",
        "where[0][type]": "after",
        "where[0][attribute]": "modifiedAt",
        "where[0][value]": "2026-03-02 01:00:00",
    }  # no parentType: a Lead has no parent
    assert LEAD_FIELDS.split(",") == [
        "id", "name", "firstName", "lastName", "emailAddress", "phoneNumber", "accountName",
        "status", "source", "description", "assignedUserId", "createdAt", "modifiedAt",
    ]  # fmt: skip


def test_leads_since_keeps_the_page_around_records_that_break_the_schema(
    sleeps: list[float],
) -> None:
    page = [
        raw_lead(1),
        raw_lead(2, modifiedAt="yesterday"),
        raw_lead(3, id="lead 3; DROP"),
        raw_lead(4, status=None),
        {k: v for k, v in raw_lead(5).items() if k != "createdAt"},
        raw_lead(6),
    ]
    answer = httpx.Response(200, json={"total": len(page), "list": page})
    listing = mocked(lambda _: answer, sleeps).list_leads_since(since=SINCE)
    assert [lead.id for lead in listing.records] == ["lead00001", "lead00006"]
    assert all(isinstance(error, SchemaError) for error in listing.invalid)
    assert [(error.record_id, error.field) for error in listing.invalid] == [
        ("lead00002", "modifiedAt"),
        ("lead 3; DROP", "id"),
        ("lead00004", "status"),
        ("lead00005", "createdAt"),
    ]
    assert listing.invalid[0].raw == page[1]


def test_leads_since_parses_aliases_clean_names_and_a_lead_without_a_name(
    sleeps: list[float],
) -> None:
    typed = raw_lead(1, name="Ada\x00 \u001b[31m" + "x" * 10_000, accountName="AC\nME")
    # A lead typed in with only a company and an address: EspoCRM's name is null then, and an
    # enum left at its empty option is "".
    nameless = raw_lead(
        2, name=None, firstName="", lastName=None, source="", phoneNumber="", description=None
    )
    answer = httpx.Response(200, json={"total": 2, "list": [typed, nameless]})
    first, second = mocked(lambda _: answer, sleeps).list_leads_since(since=SINCE).records
    assert first.name is not None
    assert first.name.startswith("Ada [31mxxx")
    assert len(first.name) == 255
    assert first.account_name == "ACME"
    assert (first.email_address, first.phone_number) == ("ada1@example.test", "+49 30 1234567")
    assert (first.status, first.source, first.assigned_user_id) == ("New", "Web Site", "user1")
    assert first.created_at == datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    assert first.modified_at == datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
    assert (second.name, second.first_name, second.last_name) == (None, None, None)
    assert (second.source, second.phone_number, second.description) == (None, None, None)
    assert (second.account_name, second.email_address) == ("ACME", "ada2@example.test")


# --- against the sandbox, over real HTTP ----------------------------------------------------


@pytest.fixture
def crm(sandbox: str) -> Iterator[httpx.Client]:
    """The sandbox's EspoCRM API and control API, as a person at the CRM would use them."""
    with httpx.Client(base_url=sandbox, timeout=5) as client:
        yield client


def set_clock(crm: httpx.Client, moment: datetime) -> None:
    crm.post("/_sandbox/clock", json={"now": moment.isoformat()}).raise_for_status()


def type_in(crm: httpx.Client, **lead: Any) -> dict[str, Any]:
    """A Lead created through EspoCRM's API, as a person types one in."""
    created = crm.post("/espocrm/api/v1/Lead", json=lead, headers=ESPO)
    assert created.status_code == 200, created.headers.get("X-Status-Reason")
    record: dict[str, Any] = created.json()
    return record


def type_in_many(crm: httpx.Client, leads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Many Leads typed in at once, by several people (a POST on loopback waits some 40 ms for
    TCP's delayed acknowledgement; one after another, 200 of them would take 9 s)."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(lambda lead: type_in(crm, **lead), leads))


def client_of(sandbox: str, sleeps: list[float], **kwargs: Any) -> EspoCrmClient:
    return EspoCrmClient(f"{sandbox}/espocrm", KEY, sleep=sleeps.append, **kwargs)


def test_leads_since_reads_the_leads_typed_in_or_edited_since_from_the_sandbox(
    sandbox: str, crm: httpx.Client, sleeps: list[float]
) -> None:
    start = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    set_clock(crm, start)
    old = type_in(crm, firstName="Grace", lastName="Hopper", emailAddress="grace@example.test")
    untouched = type_in(crm, lastName="Turing", emailAddress="alan@example.test")
    set_clock(crm, start + timedelta(hours=1))
    new = type_in(
        crm,
        firstName="Ada",
        lastName="Lovelace",
        emailAddress="ada@example.test",
        phoneNumber="+44 20 7946 0000",
        accountName="Analytical Engines",
        source="Web Site",
        description="Wants a quote.",
        assignedUserId="user1",
    )
    set_clock(crm, start + timedelta(hours=1, seconds=5))
    nameless = type_in(crm, accountName="Difference Ltd", emailAddress="info@difference.test")
    edited = crm.put(
        f"/espocrm/api/v1/Lead/{old['id']}", json={"status": "In Process"}, headers=ESPO
    )
    assert edited.status_code == 200
    client = client_of(sandbox, sleeps)
    try:
        listing = client.list_leads_since(since=start + timedelta(minutes=30))
    finally:
        client.close()
    assert listing.invalid == []
    by_id = {lead.id: lead for lead in listing.records}
    assert [lead.id for lead in listing.records] == [old["id"], new["id"], nameless["id"]]
    assert untouched["id"] not in by_id  # created and last changed before the moment
    assert by_id[old["id"]].status == "In Process"
    read = by_id[new["id"]]
    assert (read.name, read.first_name, read.last_name) == ("Ada Lovelace", "Ada", "Lovelace")
    assert (read.email_address, read.phone_number) == ("ada@example.test", "+44 20 7946 0000")
    assert (read.account_name, read.status, read.source) == (
        "Analytical Engines",
        "New",
        "Web Site",
    )
    assert (read.description, read.assigned_user_id) == ("Wants a quote.", "user1")
    assert read.created_at == read.modified_at == datetime.fromisoformat(new["createdAt"] + "Z")
    assert by_id[nameless["id"]].name is None
    assert by_id[nameless["id"]].account_name == "Difference Ltd"


def test_sandbox_lead_listing_answers_the_clients_request_as_espocrm_does(
    crm: httpx.Client,
) -> None:
    moment = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    set_clock(crm, moment)
    at_the_moment = type_in(crm, lastName="Same second", emailAddress="same@example.test")
    set_clock(crm, moment + timedelta(seconds=5))
    later = [type_in(crm, lastName=f"Later {n}", emailAddress=f"l{n}@example.test") for n in (1, 2)]
    params = {
        "select": LEAD_FIELDS,
        "maxSize": "1",
        "offset": "0",
        "orderBy": "createdAt",
        "order": "asc",
        "where[0][type]": "after",
        "where[0][attribute]": "modifiedAt",
        "where[0][value]": "2026-03-02 08:00:00",
    }
    no_total = {**ESPO, "X-No-Total": "true"}
    first = crm.get("/espocrm/api/v1/Lead", params=params, headers=no_total).json()
    second = crm.get(
        "/espocrm/api/v1/Lead", params={**params, "offset": "1"}, headers=no_total
    ).json()
    # `after` is strictly after: the lead stamped in the moment's own second is left out.
    assert [first["total"], second["total"]] == [-1, -2]  # X-No-Total: more, no more
    in_order = sorted(later, key=lambda lead: (lead["createdAt"], lead["id"]))
    assert [first["list"][0]["id"], second["list"][0]["id"]] == [lead["id"] for lead in in_order]
    assert at_the_moment["id"] not in {first["list"][0]["id"], second["list"][0]["id"]}
    assert set(first["list"][0]) == set(LEAD_FIELDS.split(","))
    counted = crm.get("/espocrm/api/v1/Lead", params=params, headers=ESPO).json()
    assert counted["total"] == 2
    too_big = crm.get("/espocrm/api/v1/Lead", params={**params, "maxSize": "201"}, headers=ESPO)
    assert too_big.status_code == 403
    nameless = crm.post("/espocrm/api/v1/Lead", json={"description": "no one"}, headers=ESPO)
    assert (nameless.status_code, nameless.headers["X-Status-Reason"]) == (
        400,
        "Field name is required.",
    )


class EditBetweenPages(httpx.BaseTransport):
    """Real HTTP to the sandbox; once the first page of Leads is answered, a person edits two
    Leads in the CRM before the client asks for the second page."""

    def __init__(self, crm: httpx.Client, edits: list[str]) -> None:
        self.inner = httpx.HTTPTransport()
        self.crm = crm
        self.edits = edits
        self.pages = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.url.path.endswith("/api/v1/Lead"):
            self.pages += 1
            if self.pages == 1:
                # A minute on: the edits' modifiedAt is newer than every Lead's listed.
                self.crm.post("/_sandbox/clock", json={"advance_seconds": 60}).raise_for_status()
                for lead_id in self.edits:
                    body = {"status": "Assigned"}
                    edited = self.crm.put(
                        f"/espocrm/api/v1/Lead/{lead_id}", json=body, headers=ESPO
                    )
                    edited.raise_for_status()
        return response

    def close(self) -> None:
        self.inner.close()


def test_leads_since_reads_a_lead_edited_between_pages_twice_at_most_never_skips_one(
    sandbox: str, crm: httpx.Client, sleeps: list[float]
) -> None:
    start = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    set_clock(crm, start)
    old = [type_in(crm, lastName=f"Old {n}", emailAddress=f"old{n}@example.test") for n in range(3)]
    set_clock(crm, start + timedelta(hours=1))
    count = PAGE_SIZE + 10
    typed = [{"lastName": f"New {n}", "emailAddress": f"new{n}@example.test"} for n in range(count)]
    new = type_in_many(crm, typed)
    ordered = sorted(new, key=lambda lead: (lead["createdAt"], lead["id"]))
    # One Lead already read is edited (an order by modifiedAt would move it to the end and shift
    # one unread Lead onto the first page: skipped); an old one is edited into the listing at its
    # front (its createdAt is older), which shifts every later Lead one place on.
    transport = EditBetweenPages(crm, [ordered[5]["id"], old[0]["id"]])
    client = client_of(sandbox, sleeps, transport=transport)
    try:
        listing = client.list_leads_since(since=start + timedelta(minutes=30))
    finally:
        client.close()
    read = [lead.id for lead in listing.records]
    assert transport.pages == 2
    assert set(read) == {lead["id"] for lead in new}  # none skipped
    assert len(read) == count + 1  # the last of the first page, read again on the second
    assert read.count(ordered[PAGE_SIZE - 1]["id"]) == 2
    # The old Lead entered the listing where it had been read already: the next sweep, reading
    # from its cursor, has it.
    assert old[0]["id"] not in read
    assert listing.invalid == []
