"""EspoCRM client against ``httpx.MockTransport``: paging, schema errors, auth and failures."""

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from followup_pipeline.integrations.errors import (
    NotFoundError,
    PermanentError,
    SchemaError,
    TransientError,
)
from followup_pipeline.integrations.espocrm import PAGE_SIZE, EspoCrmClient
from followup_pipeline.integrations.http import MAX_ATTEMPTS

Handler = Callable[[httpx.Request], httpx.Response]
MakeDeal = Callable[..., dict[str, Any]]


def espo(handler: Handler, sleeps: list[float], **kwargs: Any) -> EspoCrmClient:
    return EspoCrmClient(
        "http://crm.test/espocrm",
        "key-123",
        transport=httpx.MockTransport(handler),
        sleep=sleeps.append,
        **kwargs,
    )


def test_list_deals_pages_by_keyset_across_three_pages(
    sleeps: list[float], make_deal: MakeDeal
) -> None:
    deals = [make_deal(n) for n in range(450)]
    seen: list[httpx.QueryParams] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/espocrm/api/v1/Opportunity"
        assert request.headers["X-Api-Key"] == "key-123"
        assert request.headers["X-No-Total"] == "true"
        params = request.url.params
        seen.append(params)
        after = params.get("where[1][value]", "")
        rest = [d for d in deals if d["id"] > after]
        page = rest[: int(params["maxSize"])]
        return httpx.Response(
            200, json={"total": -1 if len(rest) > len(page) else -2, "list": page}
        )

    listing = espo(handler, sleeps).list_deals(stages=["Proposal", "Negotiation"])
    assert [d.id for d in listing.records] == [d["id"] for d in deals]
    assert "offset" not in seen[0]
    assert [p.get("where[1][value]") for p in seen] == [None, "deal00199", "deal00399"]
    assert {p["where[1][type]"] for p in seen[1:]} == {"greaterThan"}
    assert {p["where[1][attribute]"] for p in seen[1:]} == {"id"}
    assert {p["maxSize"] for p in seen} == {str(PAGE_SIZE)} == {"200"}
    params = seen[0]
    assert (params["orderBy"], params["order"]) == ("id", "asc")
    assert params["select"].split(",") == [
        "id", "name", "stage", "amount", "amountCurrency", "accountName", "assignedUserId",
        "assignedUserName", "createdAt", "modifiedAt",
    ]  # fmt: skip
    assert params["where[0][type]"] == "in"
    assert params["where[0][attribute]"] == "stage"
    assert params.get_list("where[0][value][]") == ["Proposal", "Negotiation"]


def test_list_deals_keeps_the_page_around_a_broken_record(
    sleeps: list[float], make_deal: MakeDeal
) -> None:
    broken = make_deal(2, createdAt="yesterday")
    page = [make_deal(1), broken, make_deal(3)]
    listing = espo(
        lambda _: httpx.Response(200, json={"total": 3, "list": page}), sleeps
    ).list_deals(stages=["Proposal"])
    assert [d.id for d in listing.records] == ["deal00001", "deal00003"]
    (error,) = listing.invalid
    assert isinstance(error, SchemaError)
    assert (error.record_id, error.field) == ("deal00002", "createdAt")
    assert error.raw == broken
    assert "deal00002" in str(error)
    assert "createdAt" in str(error)


def test_deal_parses_aliases_and_utc_datetimes(sleeps: list[float], make_deal: MakeDeal) -> None:
    raw = make_deal(7)
    deal = espo(lambda _: httpx.Response(200, json=raw), sleeps).get_deal(deal_id="deal00007")
    assert deal.amount_currency == "EUR"
    assert deal.assigned_user_name == "Ada"
    assert deal.created_at == datetime(2026, 11, 2, 8, 15, tzinfo=UTC)


def test_list_deals_stops_on_a_short_page_or_the_no_more_marker(
    sleeps: list[float], make_deal: MakeDeal
) -> None:
    calls: list[str] = []

    def full_pages(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.params.get("where[1][value]", ""))
        first = len(calls) == 1
        page = [make_deal(n) for n in range(PAGE_SIZE)] if first else [make_deal(999)]
        return httpx.Response(200, json={"total": -1, "list": page})

    assert len(espo(full_pages, sleeps).list_deals(stages=["Proposal"]).records) == PAGE_SIZE + 1
    assert len(calls) == 2  # the second page was short: no third request

    def exactly_one_page(request: httpx.Request) -> httpx.Response:
        calls.append("again")
        page = [make_deal(n) for n in range(PAGE_SIZE)]
        return httpx.Response(200, json={"total": -2, "list": page})

    calls.clear()
    listing = espo(exactly_one_page, sleeps).list_deals(stages=["Proposal"])
    assert (len(listing.records), calls) == (PAGE_SIZE, ["again"])  # -2: no empty page asked


def test_get_deal_missing_raises_not_found_with_reason(sleeps: list[float]) -> None:
    missing = httpx.Response(404, headers={"X-Status-Reason": "Record does not exist."})
    with pytest.raises(NotFoundError) as caught:
        espo(lambda _: missing, sleeps).get_deal(deal_id="gone")
    assert caught.value.status == 404
    assert caught.value.vendor_message == "Record does not exist."
    assert sleeps == []


def test_client_401_is_permanent_and_hides_the_key(sleeps: list[float]) -> None:
    with pytest.raises(PermanentError) as caught:
        espo(lambda _: httpx.Response(401), sleeps).stage_options()
    assert caught.value.status == 401
    assert "key-123" not in str(caught.value)


def test_client_retries_a_503_then_succeeds(sleeps: list[float]) -> None:
    answers = iter([httpx.Response(503, headers={"X-Status-Reason": "busy"})])

    def handler(request: httpx.Request) -> httpx.Response:
        return next(answers, httpx.Response(200, json=["Proposal", "Negotiation"]))

    assert espo(handler, sleeps).stage_options() == ["Proposal", "Negotiation"]
    assert len(sleeps) == 1


def test_client_timeout_becomes_transient_after_retries(sleeps: list[float]) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ReadTimeout("no answer", request=request)

    with pytest.raises(TransientError) as caught:
        espo(handler, sleeps).get_deal(deal_id="deal1")
    assert len(calls) == MAX_ATTEMPTS
    assert caught.value.ambiguous is False


def test_stage_options_asks_the_metadata_key(sleeps: list[float]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/api/v1/Metadata")
        assert request.url.params["key"] == "entityDefs.Opportunity.fields.stage.options"
        return httpx.Response(200, json=["Prospecting", "Proposal"])

    assert espo(handler, sleeps).stage_options() == ["Prospecting", "Proposal"]


def test_hmac_header_matches_an_independent_computation(sleeps: list[float]) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"total": 0, "list": []})

    espo(handler, sleeps, hmac_secret="s3cret").list_calls(deal_id="d1")
    digest = hmac.new(b"s3cret", b"GET /Opportunity/d1/calls", hashlib.sha256).hexdigest()
    expected = base64.b64encode(f"key-123:{digest}".encode()).decode()
    assert seen[0].headers["X-Hmac-Authorization"] == expected
    assert "X-Api-Key" not in seen[0].headers


def test_list_emails_since_keeps_only_later_sent_mail(sleeps: list[float]) -> None:
    emails = [
        {"id": "e1", "subject": "old", "dateSent": "2026-11-01 10:00:00"},
        {"id": "e2", "subject": "new", "dateSent": "2026-11-05 10:00:00"},
        {"id": "e3", "subject": "draft", "dateSent": None},
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/Opportunity/d1/emails")
        return httpx.Response(200, json={"total": 3, "list": emails})

    since = datetime(2026, 11, 3, tzinfo=UTC)
    listing = espo(handler, sleeps).list_emails(deal_id="d1", since=since)
    assert [e.id for e in listing.records] == ["e2"]


@pytest.mark.parametrize("body", [b'{"id": "d1", "na', b"<html>proxy error</html>", b"\xff"])
def test_get_deal_answer_that_is_not_json_is_a_typed_error(
    sleeps: list[float], body: bytes
) -> None:
    client = espo(lambda _: httpx.Response(200, content=body), sleeps)
    with pytest.raises(TransientError, match="not JSON"):
        client.get_deal(deal_id="d1")


def test_deal_names_from_the_crm_are_kept_clean_and_bounded(
    sleeps: list[float], make_deal: MakeDeal
) -> None:
    raw = make_deal(1, name="Offer\x00 \u001b[31m" + "x" * 10_000, accountName="AC\nME\ud800")
    body = json.dumps(raw).encode()  # the lone surrogate travels escaped, as PHP sends it
    client = espo(lambda _: httpx.Response(200, content=body), sleeps)
    deal = client.get_deal(deal_id="deal00001")
    assert deal.name.startswith("Offer [31mxxx")
    assert len(deal.name) == 255
    assert deal.account_name == "ACME"


def test_list_deals_a_record_with_a_malformed_id_is_invalid_not_fatal(
    sleeps: list[float], make_deal: MakeDeal
) -> None:
    page = {"total": 2, "list": [make_deal(1), make_deal(2, id="bad\x00id")]}
    client = espo(lambda _: httpx.Response(200, json=page), sleeps)
    listing = client.list_deals(stages=["Proposal"])
    assert [d.id for d in listing.records] == ["deal00001"]
    assert len(listing.invalid) == 1
