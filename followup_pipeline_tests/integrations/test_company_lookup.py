"""The People Data Labs client against PDL's published samples (``fixtures/pdl``) through
``httpx.MockTransport``, and against the sandbox's double over real HTTP."""

import json
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

from followup_pipeline.integrations.company_lookup import (
    Company,
    CompanyLookupAuthError,
    CompanyLookupClient,
)
from followup_pipeline.integrations.errors import PermanentError, TransientError
from followup_pipeline.integrations.resources import CompanyLookupResource
from followup_pipeline.sandbox.config import SandboxConfig

FIXTURES = Path(__file__).parent.parent / "fixtures" / "pdl"
KEY = "KEY-SECRET-0123456789"
Handler = Callable[[httpx.Request], httpx.Response]


def sample(name: str) -> dict[str, Any]:
    """One of PDL's published samples: request, status, headers, body."""
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def answer(name: str, **extra_headers: str) -> httpx.Response:
    """The sample's answer as PDL sends it."""
    published = sample(name)
    headers = {**published.get("headers", {}), **extra_headers}
    return httpx.Response(published["status"], json=published["body"], headers=headers)


@pytest.fixture
def opened() -> Iterator[list[CompanyLookupClient]]:
    """The clients a test made, closed after it."""
    clients: list[CompanyLookupClient] = []
    yield clients
    for made in clients:
        made.close()


def client(
    handler: Handler, sleeps: list[float], now: float = 1_700_000_000.0
) -> CompanyLookupClient:
    return CompanyLookupClient(
        "https://api.peopledatalabs.com",
        KEY,
        transport=httpx.MockTransport(handler),
        sleep=sleeps.append,
        clock=lambda: now,
    )


def expected_google() -> Company:
    """What the published google.com body says, field by field (not through the model)."""
    body = sample("enrich_google")["body"]
    return Company(
        id="google",
        name=body["name"],
        display_name=None,
        website="google.com",
        industry="internet",
        size="10001+",
        employee_count=260979,
        founded=1998,
        location={
            "name": "mountain view, california, united states",
            "locality": "mountain view",
            "region": "california",
            "country": "united states",
        },
        linkedin_url="linkedin.com/company/google",
        likelihood=4,
    )


def test_the_published_request_is_sent_and_the_published_200_parsed(
    sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer("enrich_google")

    lookup = client(handler, sleeps)
    opened.append(lookup)
    company = lookup.enrich(domain="google.com")
    assert company == expected_google()
    [request] = seen
    published = sample("enrich_google")["request"]
    assert request.method == published["method"]
    assert request.url.path == published["path"]
    assert dict(request.url.params) == published["params"]
    assert request.headers["X-Api-Key"] == KEY
    assert KEY not in str(request.url)  # the key never travels in the URL
    assert sleeps == []


def test_min_likelihood_is_passed_on(
    sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer("enrich_not_found")

    lookup = client(handler, sleeps)
    opened.append(lookup)
    assert lookup.enrich(domain="google.com", min_likelihood=6) is None
    assert seen[0].url.params["min_likelihood"] == "6"


def test_the_published_404_is_no_company(
    sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    lookup = client(lambda request: answer("enrich_not_found"), sleeps)
    opened.append(lookup)
    assert lookup.enrich(domain="no-such-company.example") is None
    assert sleeps == []  # a 404 is an answer: not tried again


def test_a_404_in_another_shape_is_a_wrong_url_not_an_unknown_company(
    sleeps: list[float],
    opened: list[CompanyLookupClient],
) -> None:
    lookup = client(lambda request: httpx.Response(404, text="<h1>Not Found</h1>"), sleeps)
    opened.append(lookup)
    with pytest.raises(PermanentError, match="not PDL's not_found"):
        lookup.enrich(domain="google.com")


def test_the_published_429_with_retry_after_waits_then_succeeds(
    sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    answers = iter([answer("rate_limited", **{"Retry-After": "7"}), answer("enrich_google")])
    lookup = client(lambda request: next(answers), sleeps)
    opened.append(lookup)
    assert lookup.enrich(domain="google.com") == expected_google()
    assert sleeps == [7.0]


def test_a_429_without_retry_after_waits_for_pdls_reset_timestamp(
    sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    reset = sample("rate_limited")["headers"]["x-ratelimit-reset"]
    now = datetime.fromisoformat(reset.replace("Z", "+00:00")).timestamp() - 3
    answers = iter([answer("rate_limited"), answer("enrich_google")])
    lookup = client(lambda request: next(answers), sleeps, now=now)
    opened.append(lookup)
    assert lookup.enrich(domain="google.com") == expected_google()
    assert sleeps == [3.0]


def test_a_lasting_rate_limit_raises_a_transient_error(
    sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    lookup = client(lambda request: answer("rate_limited", **{"Retry-After": "1"}), sleeps)
    opened.append(lookup)
    with pytest.raises(TransientError) as caught:
        lookup.enrich(domain="google.com")
    assert caught.value.status == 429
    assert "rate_limit_error" in str(caught.value)
    assert sleeps == [1.0, 1.0, 1.0]  # four attempts in all


def test_a_lasting_outage_raises_a_transient_error(
    sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    body = {"status": 503, "error": {"type": "api_error", "message": "unavailable"}}
    lookup = client(lambda request: httpx.Response(503, json=body), sleeps)
    opened.append(lookup)
    with pytest.raises(TransientError) as caught:
        lookup.enrich(domain="google.com")
    assert caught.value.status == 503
    assert len(sleeps) == 3


def test_a_timeout_raises_a_transient_error_after_the_retries(
    sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    lookup = client(handler, sleeps)
    opened.append(lookup)
    with pytest.raises(TransientError):
        lookup.enrich(domain="google.com")
    assert len(sleeps) == 3


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_is_a_permanent_auth_error(
    status: int, sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    published = sample("unauthorized")["body"]
    response = httpx.Response(status, json={**published, "status": status})
    lookup = client(lambda request: response, sleeps)
    opened.append(lookup)
    with pytest.raises(CompanyLookupAuthError) as caught:
        lookup.enrich(domain="google.com")
    assert isinstance(caught.value, PermanentError)
    assert caught.value.status == status
    assert "authentication_error" in caught.value.vendor_message
    assert KEY not in str(caught.value)
    assert sleeps == []


# --- against the sandbox's double, over real HTTP ----------------------------------------------

SANDBOX = SandboxConfig()


def sandboxed(
    sandbox: str, sleeps: list[float], opened: list[CompanyLookupClient], key: str | None = None
) -> CompanyLookupClient:
    made = CompanyLookupClient(
        f"{sandbox}/pdl",
        key or SANDBOX.pdl_api_key.get_secret_value(),
        sleep=sleeps.append,
    )
    opened.append(made)
    return made


def fault(sandbox: str, spec: dict[str, Any]) -> None:
    with httpx.Client(base_url=sandbox, timeout=5) as control:
        control.post("/_sandbox/faults", json=spec).raise_for_status()


def test_the_double_answers_the_published_company_as_the_client_reads_it(
    sandbox: str, sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    lookup = sandboxed(sandbox, sleeps, opened)
    assert lookup.enrich(domain="google.com") == expected_google()
    assert lookup.enrich(domain="no-such-company.example") is None
    demo = lookup.enrich(domain="nordwerk.example")
    assert demo is not None
    assert demo.display_name == "Nordwerk AG"


def test_the_double_refuses_a_wrong_key(
    sandbox: str, sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    lookup = sandboxed(sandbox, sleeps, opened, key="wrong")
    with pytest.raises(CompanyLookupAuthError):
        lookup.enrich(domain="google.com")


def test_the_double_rate_limits_then_the_client_succeeds(
    sandbox: str, sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    fault(sandbox, {"vendor": "pdl", "kind": "rate_limit", "count": 2, "retry_after": 1})
    lookup = sandboxed(sandbox, sleeps, opened)
    assert lookup.enrich(domain="google.com") == expected_google()
    assert sleeps == [1.0, 1.0]


def test_an_outage_of_the_double_raises_a_transient_error(
    sandbox: str, sleeps: list[float], opened: list[CompanyLookupClient]
) -> None:
    fault(sandbox, {"vendor": "pdl", "kind": "outage", "seconds": 30})
    lookup = sandboxed(sandbox, sleeps, opened)
    with pytest.raises(TransientError) as caught:
        lookup.enrich(domain="google.com")
    assert caught.value.status == 503


def test_the_resource_reads_its_key_from_the_environment_and_closes_its_client(
    sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_PDL_KEY", SANDBOX.pdl_api_key.get_secret_value())
    resource = CompanyLookupResource(base_url=f"{sandbox}/pdl", api_key=dg.EnvVar("TEST_PDL_KEY"))
    with dg.build_resources({"company_lookup": resource}) as built:
        live = built.company_lookup
        company = live.get_client().enrich(domain="lumen-labs.example")
        assert company is not None
        assert company.display_name == "Lumen Labs"
    assert live._client is None
