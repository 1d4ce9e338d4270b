"""People Data Labs' Company Enrichment API (v5): the company behind a lead's e-mail domain.

One idempotent ``GET /v5/company/enrich?website=<domain>`` with the key in ``X-Api-Key``, under
the shared HTTP policy (``http.py``): 429 and 5xx are tried again, honouring ``Retry-After`` or,
without it, PDL's ``x-ratelimit-reset`` (a UTC timestamp, not the Unix seconds the shared layer
reads), and then raised as a ``TransientError``. A 404 in PDL's shape (``not_found``) is an
answer, not a failure: PDL knows no such company, so ``enrich`` returns None. A 404 in any other
shape means the URL is wrong and is raised. 401 and 403 are ``CompanyLookupAuthError``: the key
is missing, wrong or not allowed here, which no retry mends. The contract: docs/vendors.md.
"""

import time
from datetime import datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from followup_pipeline.integrations.errors import (
    IntegrationError,
    NotFoundError,
    PermanentError,
    TransientError,
    schema_error,
)
from followup_pipeline.integrations.http import (
    DEFAULT_TIMEOUTS,
    Clock,
    Sleep,
    Timeouts,
    VendorHttp,
    build_client,
)

VENDOR = "pdl"
ENRICH_PATH = "v5/company/enrich"
#: PDL's ``error.type`` of a 404 that means "no such company" (its Errors & Status Codes page).
NOT_FOUND_TYPE = "not_found"


class CompanyLookupAuthError(PermanentError):
    """PDL refused the key (401 ``authentication_error``, or 403): a configuration problem,
    the same for every lead, so the caller stops looking up rather than skipping one lead."""


class CompanyLocation(BaseModel):
    """Where the company has its headquarters, as PDL writes it (lower-case names)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str | None = None
    locality: str | None = None
    region: str | None = None
    country: str | None = None


class Company(BaseModel):
    """The fields of a PDL company profile we keep; PDL sends many more, and a profile field
    PDL has no data for is null."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    name: str | None = None
    #: The self-reported capitalisation (``name`` is always lower-case); newer profiles only.
    display_name: str | None = None
    website: str | None = None
    industry: str | None = None
    #: A range such as ``"51-200"`` or ``"10001+"``.
    size: str | None = None
    employee_count: int | None = None
    founded: int | None = None
    location: CompanyLocation | None = None
    linkedin_url: str | None = None
    #: PDL's confidence in the match, 1 (low) to 10 (high).
    likelihood: int | None = None


def pdl_message(response: httpx.Response) -> str:
    """PDL's error text: ``error.type: error.message`` when the body is its JSON, else the text."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        return response.text[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{error.get('type', '')}: {error.get('message', '')}"[:300]
    return response.text[:300]


def reset_seconds(response: httpx.Response, *, now: float) -> float | None:
    """Seconds until PDL's ``x-ratelimit-reset`` (``2022-02-23T20:19:55Z``), if it says."""
    value = response.headers.get("x-ratelimit-reset", "")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, moment.timestamp() - now)


class _PdlHttp(VendorHttp):
    """The shared policy with PDL's own reading of a failed answer."""

    def error_for(self, response: httpx.Response) -> IntegrationError:
        error = super().error_for(response)
        if isinstance(error, TransientError) and error.retry_after is None:
            error.retry_after = reset_seconds(response, now=self._clock())
        if isinstance(error, PermanentError) and error.status in (401, 403):
            return CompanyLookupAuthError(
                str(error).removeprefix(f"{VENDOR}: "),
                vendor=VENDOR,
                status=error.status,
                vendor_message=error.vendor_message,
            )
        return error


class CompanyLookupClient:
    """Company profiles by website from People Data Labs."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        transport: httpx.BaseTransport | None = None,
        sleep: Sleep = time.sleep,
        clock: Clock = time.time,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        # The key goes in the header, never in the URL (PDL also reads ``api_key``): a URL ends
        # up in logs and in our errors' messages.
        client = build_client(
            base_url, headers={"X-Api-Key": api_key}, transport=transport, timeouts=timeouts
        )
        self._http = _PdlHttp(
            client, vendor=VENDOR, message_of=pdl_message, sleep=sleep, clock=clock
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.client.close()

    def enrich(self, *, domain: str, min_likelihood: int | None = None) -> Company | None:
        """The company whose website is ``domain``; None when PDL knows none (its 404), or
        none as likely as ``min_likelihood`` (1-10). PDL charges per match, not per request."""
        params: dict[str, Any] = {"website": domain}
        if min_likelihood is not None:
            params["min_likelihood"] = min_likelihood
        try:
            response = self._http.request("GET", ENRICH_PATH, params=params)
        except NotFoundError as error:
            if error.vendor_message.startswith(f"{NOT_FOUND_TYPE}:"):
                return None
            text = str(error).removeprefix(f"{VENDOR}: ")
            raise PermanentError(
                f"{text} (not PDL's not_found: is the URL right?)",
                vendor=VENDOR,
                status=404,
                vendor_message=error.vendor_message,
            ) from None
        raw = self._http.json(response)
        try:
            return Company.model_validate(raw)
        except ValidationError as exc:
            raise schema_error(raw, exc, vendor=VENDOR) from None
