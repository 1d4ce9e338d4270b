"""The Accredible client against Accredible's published samples (``fixtures/accredible``) over
``httpx.MockTransport``: what a create sends, the answers and errors it reads, paging, refusals;
then the sandbox's double against the same samples, and the client against the double."""

import json
import re
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest

from followup_pipeline.integrations.accredible import AccredibleClient, Credential, message_of
from followup_pipeline.integrations.errors import PermanentError, SchemaError
from followup_pipeline.sandbox.config import SandboxConfig

FIXTURES = Path(__file__).parent.parent / "fixtures" / "accredible"
KEY = "0123456789abcdef"
BASE = "https://api.accredible.com"
Handler = Callable[[httpx.Request], httpx.Response]
#: (id, e-mail, group) of the published v1 credential and of the published v2 search item.
PUBLISHED_V1 = ("10000005", "jor@dan.org", 9549)
PUBLISHED_V2 = ("12345678", "john.doe@mailinator.test", 12345)


def published(name: str) -> Any:
    """One published sample, parsed."""
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture
def make_client(sleeps: list[float]) -> Iterator[Callable[..., AccredibleClient]]:
    """A client on a mock transport (None: at ``base`` over HTTP), its sleeps recorded; closed
    after the test."""
    made: list[AccredibleClient] = []

    def make(handler: Handler | None, base: str = BASE, key: str = KEY) -> AccredibleClient:
        transport = httpx.MockTransport(handler) if handler else None
        client = AccredibleClient(base, key, transport=transport, sleep=sleeps.append)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def answering(body: Any, seen: list[httpx.Request], status: int = 200) -> Handler:
    """Answer with ``body`` (a list of them: one a request, in turn), the requests recorded."""
    bodies = iter(body) if isinstance(body, list) else None

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=next(bodies) if bodies else body)

    return handler


def test_a_create_carries_the_published_requests_fields_and_the_token_header(
    make_client: Callable[..., AccredibleClient],
) -> None:
    sample = published("create_request")["credential"]
    seen: list[httpx.Request] = []
    client = make_client(answering(published("create_response"), seen))
    made = client.issue(
        group_id=sample["group_id"],
        name=sample["recipient"]["name"],
        email=sample["recipient"]["email"],
        issued_on=date.fromisoformat(sample["issued_on"]),
        key="lms-5-31",
    )
    [request] = seen
    assert (request.method, request.url.path) == ("POST", "/v1/credentials")
    assert request.headers["authorization"] == f"Token token={KEY}"
    assert request.headers["content-type"] == "application/json"
    sent = json.loads(request.content)["credential"]
    assert sent["group_id"] == sample["group_id"]
    assert sent["recipient"] == {k: sample["recipient"][k] for k in ("name", "email")}
    assert sent["issued_on"] == sample["issued_on"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", sent["issued_on"])
    assert sent["id"] == "lms-5-31"  # "your own internal ID": not in the example, documented
    assert sent["meta_data"] == {"followup_key": "lms-5-31"}
    assert set(sent) <= set(sample) | {"id"}  # nothing the published request does not have
    assert (made.id, made.email, made.group_id) == PUBLISHED_V1


def test_a_credential_is_read_by_its_id_and_a_404_is_none(
    make_client: Callable[..., AccredibleClient],
) -> None:
    seen: list[httpx.Request] = []
    found = make_client(answering(published("get_response"), seen)).credential("10000005")
    assert (seen[0].method, seen[0].url.path) == ("GET", "/v1/credentials/10000005")
    assert found is not None
    assert found.id == "10000005"
    missing = make_client(answering(published("get_not_found"), seen, 404))
    assert missing.credential("lms-5-31") is None
    assert seen[1].url.path == "/v1/credentials/lms-5-31"


def test_the_published_create_get_and_search_answers_parse_with_text_ids() -> None:
    for name in ("create_response", "get_response"):
        credential = Credential.read(published(name)["credential"])
        assert (credential.id, credential.email, credential.group_id) == PUBLISHED_V1
        assert (credential.license_id, credential.key, credential.approve) == (None, None, True)
    [item] = published("search_v2_response")["credentials"]
    credential = Credential.read(item)
    assert (credential.id, credential.email, credential.group_id) == PUBLISHED_V2
    [older] = published("search_v2_response_apiary")["credentials"]
    credential = Credential.read(older)
    assert (credential.id, credential.group_id, credential.license_id) == ("10", 10, "l001")
    assert credential.carries("l001")
    assert not credential.carries("l002")


def test_a_search_item_that_breaks_the_schema_is_kept_aside_and_the_listing_goes_on(
    make_client: Callable[..., AccredibleClient],
) -> None:
    page = published("search_v2_response")
    broken = {**page["credentials"][0], "id": 7, "recipient_email": None}
    body = {"credentials": [broken, *page["credentials"]], "meta": {"count": 2}}
    invalid: list[SchemaError] = []
    found = list(make_client(answering(body, [])).in_group(12345, invalid=invalid))
    assert [c.id for c in found] == ["12345678"]
    [error] = invalid
    assert (error.record_id, error.field) == ("7", "email")
    assert error.raw == broken  # kept for an operator
    with pytest.raises(SchemaError, match="email"):  # without a place for them: an error
        list(make_client(answering(body, [])).in_group(12345))


def test_a_search_pages_by_the_cursor_until_none_is_left(
    make_client: Callable[..., AccredibleClient],
) -> None:
    seen: list[httpx.Request] = []
    pages = [published("search_v2_response"), published("search_v2_response_apiary")]
    found = list(make_client(answering(pages, seen)).in_group(12345))
    assert [c.id for c in found] == ["12345678", "10"]
    assert len(seen) == 2  # the second page has no cursor: the end
    first, second = (json.loads(r.content) for r in seen)
    assert all(r.url.path == "/v2/credentials/search" for r in seen)
    assert first["query"] == second["query"] == {"group.id": 12345}
    assert "cursor" not in first["page"]
    assert second["page"]["cursor"] == published("search_v2_response")["meta"]["cursor"]
    assert set(second["page"]) == set(published("search_v2_request_cursor")["page"])


#: Each published error body and what its message must name.
ERRORS = {
    "error_400_invalid_search_query": "Sort order increasing is not supported",
    "error_401_not_authorized": "not authorized",
    "error_401_segments": "Not enough or too many segments",
    "error_401_issuer_token": "issuer_token not valid",
    "error_403_private": "Private Certificate",
    "error_404_doesnt_exist": "Doesn't exist",
    "error_404_not_found": "Not found",
    "error_404_group": "Group does not exist",
    "error_422_invalid_group": "Invalid Group",
    "error_422_no_recipient": "without recipient data",
    "error_422_validation": "course_name can't be blank",
    "error_500": "Internal server error",
    "get_not_found": "No credential with the id given",
}


def test_every_published_error_body_is_listed() -> None:
    assert {p.stem for p in FIXTURES.glob("error_*.json")} | {"get_not_found"} == set(ERRORS)


@pytest.mark.parametrize(("name", "named"), ERRORS.items())
def test_every_published_error_body_gives_a_message_naming_the_problem(
    name: str, named: str
) -> None:
    status = int(name.split("_")[1]) if name.startswith("error_") else 404
    assert named in message_of(httpx.Response(status, json=published(name)))


def test_a_refused_create_names_the_problem_and_is_not_sent_again(
    make_client: Callable[..., AccredibleClient], sleeps: list[float]
) -> None:
    seen: list[httpx.Request] = []
    client = make_client(answering(published("error_422_invalid_group"), seen, 422))
    with pytest.raises(PermanentError) as caught:
        client.issue(
            group_id=1, name="Ana", email="ana@example.com", issued_on=date.today(), key="k"
        )
    assert (caught.value.status, caught.value.vendor_message) == (422, "Invalid Group")
    assert (len(seen), sleeps) == (1, [])


def test_a_401_in_plain_text_is_a_permanent_error_with_its_text(
    make_client: Callable[..., AccredibleClient], sleeps: list[float]
) -> None:
    client = make_client(lambda request: httpx.Response(401, text="HTTP Token: Access denied.\n"))
    with pytest.raises(PermanentError) as caught:
        client.credential("10000005")
    assert caught.value.status == 401
    assert "HTTP Token: Access denied." in str(caught.value)
    assert KEY not in str(caught.value)
    assert sleeps == []


@pytest.mark.parametrize(
    ("broken", "field"),
    [
        (lambda raw: raw | {"recipient": {"name": raw["recipient"]["name"]}}, "email"),
        (lambda raw: raw | {"group_id": "design"}, "group_id"),
        (lambda raw: {k: v for k, v in raw.items() if k != "id"}, "id"),
        (lambda raw: "10000005", "credential"),
    ],
)
def test_a_body_that_is_not_a_credential_is_a_schema_error_naming_the_field(
    make_client: Callable[..., AccredibleClient],
    broken: Callable[[dict[str, Any]], Any],
    field: str,
) -> None:
    raw = broken(published("get_response")["credential"])
    client = make_client(answering({"credential": raw}, []))
    with pytest.raises(SchemaError) as caught:
        client.credential("10000005")
    assert caught.value.field == field
    assert caught.value.raw == raw


@pytest.mark.parametrize("wanted", ["../v2/credentials/search", "a/b", "..", "", "1?x=2"])
def test_an_id_that_would_reach_another_path_is_refused_before_any_request(
    make_client: Callable[..., AccredibleClient], wanted: str
) -> None:
    client = make_client(lambda request: pytest.fail("nothing may be sent"))
    with pytest.raises(SchemaError, match="credential id"):
        client.credential(wanted)


# --- against the sandbox's double, over real HTTP ----------------------------------------------

SANDBOX_KEY = SandboxConfig().accredible_keys["academy-berlin"].get_secret_value()
GROUP = 9549
#: Keys of the published v1 credential the double may leave out: rendered images, evidence,
#: references and the issuer's profile, which this product never reads.
V1_OMISSIONS = {"evidence_items", "references", "certificate", "badge", "issuer", "seo_image"}
#: The same for a v2 search item.
V2_OMISSIONS = {"seo_image"}


def accredible(sandbox: str, key: str = SANDBOX_KEY) -> httpx.Client:
    auth = {"Authorization": f"Token token={key}"}
    return httpx.Client(base_url=f"{sandbox}/accredible", headers=auth, timeout=5)


def create_body(email: str, key: str) -> dict[str, Any]:
    recipient = {"name": "Lea Brandt", "email": email}
    credential = {"id": key, "group_id": GROUP, "recipient": recipient, "issued_on": "2026-01-11"}
    return {"credential": credential | {"meta_data": {"followup_key": key}}}


def test_the_doubles_answers_have_the_keys_of_the_published_samples(sandbox: str) -> None:
    with accredible(sandbox) as api:
        created = api.post("/v1/credentials", json=create_body("lea@example.com", "lms-1"))
        read = api.get("/v1/credentials/lms-1")
        searched = api.post("/v2/credentials/search", json={"query": {"group.id": GROUP}})
    gaps: dict[str, list[str]] = {}
    for answer, sample in ((created, "create_response"), (read, "get_response")):
        assert answer.status_code == 200
        credential, expected = answer.json()["credential"], published(sample)["credential"]
        gaps[sample] = sorted(set(expected) - set(credential) - V1_OMISSIONS)
        assert set(credential["recipient"]) == set(expected["recipient"])
        assert isinstance(credential["id"], str)
    assert searched.status_code == 200
    [item] = searched.json()["credentials"]
    for sample in ("search_v2_response", "search_v2_response_apiary"):
        [expected] = published(sample)["credentials"]
        gaps[sample] = sorted(set(expected) - set(item) - V2_OMISSIONS)
    assert {sample: keys for sample, keys in gaps.items() if keys} == {}  # keys it leaves out
    assert isinstance(item["id"], int)
    assert {"count", "from", "size"} <= set(searched.json()["meta"])


def test_the_double_refuses_a_duplicate_with_422_and_a_wrong_key_with_plain_401(
    sandbox: str,
) -> None:
    with accredible(sandbox) as api:
        assert api.post("/v1/credentials", json=create_body("lea@example.com", "a")).is_success
        again = api.post("/v1/credentials", json=create_body("LEA@example.com", "b"))
    assert again.status_code == 422
    assert "errors" in again.json()
    assert "recipient.email" in message_of(again)
    with accredible(sandbox, key="wrong") as api:
        refused = api.get("/v1/credentials/a")
    assert refused.status_code == 401
    assert refused.headers["content-type"].startswith("text/plain")
    assert refused.text.strip() == "HTTP Token: Access denied."


def test_the_client_issues_reads_back_by_our_key_and_finds_it_in_the_group(
    sandbox: str, make_client: Callable[..., AccredibleClient], sleeps: list[float]
) -> None:
    client = make_client(None, f"{sandbox}/accredible", SANDBOX_KEY)
    made = client.issue(
        group_id=GROUP, name="Lea Brandt", email="lea@example.com",
        issued_on=date(2026, 1, 11), key="lms-5-31",
    )  # fmt: skip
    read = client.credential("lms-5-31")
    assert read is not None
    assert (read.id, read.email, read.key) == (made.id, "lea@example.com", "lms-5-31")
    assert read.carries("lms-5-31")  # v1 answers carry no license_id: meta_data tells
    listed = list(client.in_group(GROUP))
    assert [(c.id, c.license_id, c.key) for c in listed] == [(made.id, "lms-5-31", "lms-5-31")]
    assert list(client.in_group(9550)) == []
    newyork = SandboxConfig().accredible_keys["academy-newyork"].get_secret_value()
    other = make_client(None, f"{sandbox}/accredible", newyork)
    assert other.credential("lms-5-31") is None  # another academy's account
    assert sleeps == []
