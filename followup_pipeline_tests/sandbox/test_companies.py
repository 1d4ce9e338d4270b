"""The People Data Labs double against PDL's published samples (``fixtures/pdl``): the same
requests get the published answers' shapes; the key, the rate limit and the faults."""

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from followup_pipeline.sandbox.companies import COMPANIES
from followup_pipeline.sandbox.intake import VISITORS
from followup_pipeline_tests.sandbox.conftest import Sandbox, SandboxFactory

pytestmark = pytest.mark.anyio
FIXTURES = Path(__file__).parent.parent / "fixtures" / "pdl"
PDL = {"X-Api-Key": "sandbox-pdl-key"}
URL = "/pdl/v5/company/enrich"


def sample(name: str) -> dict[str, Any]:
    """One of PDL's published samples: request, status, headers, body."""
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


async def ask(
    sandbox: Sandbox, name: str, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, dict[str, Any]]:
    """Send the published request of sample ``name`` to the double; its answer and the sample."""
    published = sample(name)
    request = published["request"]
    response = await sandbox.client.request(
        request["method"],
        "/pdl" + request["path"],
        params=request["params"],
        headers=PDL if headers is None else headers,
    )
    return response, published


async def test_the_published_enrichment_gets_the_published_company(sandbox: Sandbox) -> None:
    response, published = await ask(sandbox, "enrich_google")
    assert response.status_code == published["status"] == 200
    body, expected = response.json(), published["body"]
    assert set(body) == set(expected)  # the same fields, at the top level, no `data` object
    kept = ("status", "id", "name", "website", "industry", "size", "employee_count", "founded")
    kept += ("linkedin_url", "likelihood", "location")
    assert {key: body[key] for key in kept} == {key: expected[key] for key in kept}
    # The rate-limit headers PDL's samples show, in their formats.
    assert set(published["headers"]) - {"x-call-credits-spent"} <= set(response.headers)
    datetime.fromisoformat(response.headers["x-ratelimit-reset"].replace("Z", "+00:00"))
    assert json.loads(response.headers["x-ratelimit-remaining"])["minute"] >= 0


async def test_every_company_it_knows_has_pdls_fields_only(sandbox: Sandbox) -> None:
    published = set(sample("enrich_google")["body"]) | {"display_name"}  # the newer schema's
    for website in COMPANIES:
        response = await sandbox.client.get(URL, params={"website": website}, headers=PDL)
        assert response.status_code == 200, website
        assert set(response.json()) <= published, website


async def test_it_knows_the_companies_of_the_demos_leads(sandbox: Sandbox) -> None:
    domains = {email.rpartition("@")[2] for _, email, company, _ in VISITORS if company}
    assert domains <= set(COMPANIES)


async def test_an_unknown_company_is_the_published_404(sandbox: Sandbox) -> None:
    response, published = await ask(sandbox, "enrich_not_found")
    assert response.status_code == published["status"] == 404
    assert response.json() == published["body"]


@pytest.mark.parametrize(
    "website", ["https://www.Google.com/about", "GOOGLE.COM", "www.google.com"]
)
async def test_a_website_is_matched_as_pdl_matches_it(sandbox: Sandbox, website: str) -> None:
    response = await sandbox.client.get(URL, params={"website": website}, headers=PDL)
    assert response.json()["id"] == "google"


@pytest.mark.parametrize(
    "params",
    [
        {"pdl_id": "google"},
        {"name": "Google Inc."},
        {"profile": "https://www.linkedin.com/company/google/"},
    ],
)
async def test_pdl_id_name_and_profile_match_too(sandbox: Sandbox, params: dict[str, str]) -> None:
    response = await sandbox.client.get(URL, params=params, headers=PDL)
    assert response.json()["id"] == "google"


async def test_below_min_likelihood_is_a_404(sandbox: Sandbox) -> None:
    params = {"website": "google.com", "min_likelihood": "5"}  # the sample's likelihood is 4
    response = await sandbox.client.get(URL, params=params, headers=PDL)
    assert response.json() == sample("enrich_not_found")["body"]


@pytest.mark.parametrize("headers", [{}, {"X-Api-Key": "wrong"}], ids=["none", "wrong"])
async def test_a_missing_or_wrong_key_is_refused(sandbox: Sandbox, headers: dict[str, str]) -> None:
    response, published = await ask(sandbox, "unauthorized", headers=headers)
    assert response.status_code == published["status"] == 401
    assert response.json() == published["body"]


async def test_the_key_may_come_as_the_api_key_parameter(sandbox: Sandbox) -> None:
    params = {"website": "google.com", "api_key": "sandbox-pdl-key"}
    response = await sandbox.client.get(URL, params=params)
    assert response.status_code == 200


async def test_a_request_without_a_match_parameter_is_a_400(sandbox: Sandbox) -> None:
    response = await sandbox.client.get(URL, params={"locality": "berlin"}, headers=PDL)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_past_its_limit_it_answers_the_published_429(make_sandbox: SandboxFactory) -> None:
    async with make_sandbox(pdl_rate_limit=2) as sandbox:
        for _ in range(2):
            response, _ = await ask(sandbox, "enrich_google")
            assert response.status_code == 200
        response, published = await ask(sandbox, "rate_limited")
    assert response.status_code == published["status"] == 429
    assert response.json() == published["body"]
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert json.loads(response.headers["x-ratelimit-remaining"]) == {"minute": 0}


async def test_a_rate_limit_fault_is_the_published_429_with_retry_after(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="pdl", kind="rate_limit", count=1, retry_after=7)
    response, published = await ask(sandbox, "rate_limited")
    assert response.status_code == 429
    assert response.json() == published["body"]
    assert response.headers["Retry-After"] == "7"
    response, _ = await ask(sandbox, "enrich_google")
    assert response.status_code == 200  # a burst of one


async def test_an_outage_answers_pdls_5xx_shape(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="pdl", kind="outage", seconds=30)
    for _ in range(2):
        response, _ = await ask(sandbox, "enrich_google")
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "api_error"
        assert response.json()["status"] == 503


async def test_latency_delays_the_answer(sandbox: Sandbox) -> None:
    await sandbox.fault(vendor="pdl", kind="latency", latency_s=0.3, count=1)
    started = time.monotonic()
    response, _ = await ask(sandbox, "enrich_google")
    assert response.status_code == 200
    assert time.monotonic() - started >= 0.3


async def test_answers_are_counted_under_pdl(sandbox: Sandbox) -> None:
    await ask(sandbox, "enrich_google")
    await ask(sandbox, "enrich_not_found")
    stats = (await sandbox.client.get("/_sandbox/stats")).json()
    assert stats["requests"]["pdl"] == {"200": 1, "404": 1}
