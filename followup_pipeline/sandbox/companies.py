"""The People Data Labs double: ``GET /v5/company/enrich``, the company lookup by website.

It follows PDL's published contract (docs/vendors.md): the key in ``X-Api-Key`` (or the
``api_key`` parameter), at least one of ``pdl_id``, ``name``, ``ticker``, ``website`` or
``profile``, the profile's fields at the top level of a 200 with ``status`` and ``likelihood``,
404 ``not_found`` for a company it does not know (or one below ``min_likelihood``), and the
rate-limit headers on every answer, a 429 with ``Retry-After`` past the per-minute limit.
It knows Google (PDL's own published example) and the companies of the demo's leads.
"""

import hmac
import math
import time
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from followup_pipeline.sandbox.errors import pdl_error
from followup_pipeline.sandbox.state import SandboxState

#: The parameters of which a request needs one: PDL refuses an ambiguous match with a 400.
MATCH_PARAMETERS = ("pdl_id", "name", "ticker", "website", "profile")


def _location(locality: str, region: str, country: str, continent: str) -> dict[str, Any]:
    return {
        "name": f"{locality}, {region}, {country}",
        "locality": locality,
        "region": region,
        "metro": None,
        "country": country,
        "continent": continent,
        "street_address": None,
        "address_line_2": None,
        "postal_code": None,
        "geo": None,
    }


def _company(
    slug: str,
    name: str,
    display_name: str,
    website: str,
    industry: str,
    size: str,
    employee_count: int,
    founded: int,
    location: dict[str, Any],
    likelihood: int,
) -> dict[str, Any]:
    return {
        "name": name,
        "display_name": display_name,
        "size": size,
        "employee_count": employee_count,
        "id": slug,
        "founded": founded,
        "industry": industry,
        "location": location,
        "linkedin_id": None,
        "linkedin_url": f"linkedin.com/company/{slug}",
        "facebook_url": None,
        "twitter_url": None,
        "profiles": [f"linkedin.com/company/{slug}"],
        "website": website,
        "ticker": None,
        "type": "private",
        "summary": None,
        "tags": [],
        "headline": None,
        "alternative_names": [],
        "alternative_domains": [],
        "affiliated_profiles": [],
        "likelihood": likelihood,
    }


#: What PDL's published example of a company enrichment (website google.com) shows, as PDL
#: publishes it (lower-case names; no ``display_name`` in that example).
GOOGLE: dict[str, Any] = {
    "name": "google",
    "size": "10001+",
    "employee_count": 260979,
    "id": "google",
    "founded": 1998,
    "industry": "internet",
    "location": {
        "name": "mountain view, california, united states",
        "locality": "mountain view",
        "region": "california",
        "metro": "san francisco, california",
        "country": "united states",
        "continent": "north america",
        "street_address": "1600 amphitheatre parkway",
        "address_line_2": None,
        "postal_code": "94043",
        "geo": None,
    },
    "linkedin_id": "1441",
    "linkedin_url": "linkedin.com/company/google",
    "facebook_url": "facebook.com/google",
    "twitter_url": "twitter.com/google",
    "profiles": [
        "linkedin.com/company/google",
        "linkedin.com/company/1441",
        "facebook.com/google",
        "twitter.com/google",
        "crunchbase.com/organization/google",
    ],
    "website": "google.com",
    "ticker": "GOOGL",
    "type": "public",
    "summary": None,
    "tags": ["online video", "artificial intelligence", "mobile", "android", "cloud"],
    "headline": None,
    "alternative_names": ["google inc.", "google, inc."],
    "alternative_domains": ["youtube.com", "googlevideo.com"],
    "affiliated_profiles": ["youtube", "google-cloud"],
    "likelihood": 4,
}

_DE = ("germany", "europe")
_UK = ("united kingdom", "europe")

#: The companies the double knows, by website: Google and the demo's leads' companies
#: (``sandbox/intake.py``); ``gmx.example``, the demo's private address, is unknown (404).
COMPANIES: dict[str, dict[str, Any]] = {
    company["website"]: company
    for company in (
        GOOGLE,
        _company(
            "brandt-moebel",
            "brandt möbel gmbh",
            "Brandt Möbel GmbH",
            "brandt-moebel.example",
            "furniture",
            "51-200",
            84,
            1978,
            _location("berlin", "berlin", *_DE),
            8,
        ),
        _company(
            "hughes-design",
            "hughes design ltd",
            "Hughes Design Ltd",
            "hughes-design.example",
            "design",
            "1-10",
            7,
            2015,
            _location("london", "england", *_UK),
            7,
        ),
        _company(
            "nordwerk",
            "nordwerk ag",
            "Nordwerk AG",
            "nordwerk.example",
            "machinery",
            "501-1000",
            640,
            1952,
            _location("hamburg", "hamburg", *_DE),
            9,
        ),
        _company(
            "okafor-consulting",
            "okafor consulting",
            "Okafor Consulting",
            "okafor-consulting.example",
            "management consulting",
            "1-10",
            3,
            2019,
            _location("london", "england", *_UK),
            6,
        ),
        _company(
            "lumen-labs",
            "lumen labs",
            "Lumen Labs",
            "lumen-labs.example",
            "computer software",
            "11-50",
            23,
            2021,
            _location("munich", "bavaria", *_DE),
            8,
        ),
    )
}


def normalise_website(value: str) -> str:
    """A website as PDL matches it: no scheme, no ``www.``, no path, lower-case."""
    text = value.strip().lower()
    text = text.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
    return text.removeprefix("www.").rstrip(".")


def find_company(params: dict[str, str]) -> dict[str, Any] | None:
    """The company a request names by ``pdl_id``, ``website``, ``name`` or ``profile``."""
    if "pdl_id" in params:  # PDL: with an id, the other inputs are ignored
        return next((c for c in COMPANIES.values() if c["id"] == params["pdl_id"]), None)
    if "website" in params:
        found = COMPANIES.get(normalise_website(params["website"]))
        if found is not None:
            return found
    name = params.get("name", "").strip().lower()
    profile = params.get("profile", "").strip().lower().split("://", 1)[-1]
    profile = profile.removeprefix("www.").rstrip("/")
    for company in COMPANIES.values():
        if name and name in (company["name"], *company["alternative_names"]):
            return company
        if profile and profile in company["profiles"]:
            return company
    return None


def _rate_headers(state: SandboxState) -> tuple[bool, dict[str, str], int]:
    """Spend one request of the key's minute: (allowed, PDL's headers, seconds to the reset)."""
    limit = state.config.pdl_rate_limit
    allowed, remaining, reset = state.take_rate("pdl", limit, state.config.pdl_rate_window_s)
    reset_at = datetime.fromtimestamp(reset, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    headers = {
        "x-ratelimit-limit": f'{{"minute": {limit}}}',
        "x-ratelimit-remaining": f'{{"minute": {remaining}}}',
        "x-ratelimit-reset": reset_at,
        "x-call-credits-type": "enrich_company",
    }
    window = state.config.pdl_rate_window_s
    wait = max(1, min(math.ceil(window), math.ceil(reset - time.time())))
    return allowed, headers, wait


def pdl_app(state: SandboxState) -> Starlette:
    """The company enrichment endpoint under ``/pdl``."""

    async def enrich(request: Request) -> Response:
        params = dict(request.query_params)
        key = request.headers.get("x-api-key") or params.pop("api_key", "")
        params.pop("api_key", None)
        expected = state.config.pdl_api_key.get_secret_value()
        if not key or not hmac.compare_digest(key.encode(), expected.encode()):
            return pdl_error(401)
        allowed, headers, wait = _rate_headers(state)
        if not allowed:
            answer = pdl_error(429, retry_after=wait)
            answer.headers.update(headers)
            return answer
        if not any(params.get(name, "").strip() for name in MATCH_PARAMETERS):
            answer = pdl_error(
                400, "Request needs at least one of pdl_id, name, ticker, website or profile"
            )
        else:
            answer = _match(params)
        answer.headers.update(headers)
        return answer

    return Starlette(routes=[Route("/v5/company/enrich", enrich, methods=["GET"])])


def _match(params: dict[str, str]) -> Response:
    company = find_company({k: v for k, v in params.items() if v.strip()})
    try:
        min_likelihood = int(params.get("min_likelihood", "0"))
    except ValueError:
        return pdl_error(400, "min_likelihood must be an integer")
    if company is None or company["likelihood"] < min_likelihood:
        return pdl_error(404)
    return JSONResponse({"status": 200, **company}, 200)
