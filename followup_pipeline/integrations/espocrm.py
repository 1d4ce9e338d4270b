"""EspoCRM client (REST ``/api/v1``): deals, their activity, the valid stage names, and the
Leads changed since a moment.

Read only. Auth by ``X-Api-Key`` or, with a secret, the HMAC header. EspoCRM has no rate limit;
its errors have empty bodies and the reason in ``X-Status-Reason``.
"""

import base64
import hashlib
import hmac
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx

from followup_pipeline.integrations.errors import PermanentError, SchemaError
from followup_pipeline.integrations.espocrm_models import (
    Call,
    Deal,
    DealListing,
    Email,
    Lead,
    Listing,
    Meeting,
    R,
    parse_records,
)
from followup_pipeline.integrations.http import (
    DEFAULT_TIMEOUTS,
    MAX_PAGES,
    Sleep,
    Timeouts,
    VendorHttp,
    build_client,
    collect_pages,
)

VENDOR = "espocrm"
API_PREFIX = "api/v1"
#: EspoCRM refuses ``maxSize`` above 200 (403).
PAGE_SIZE = 200
#: Ids in one ``id in (…)`` listing: an EspoCRM webhook's batch, and a URL of about 2.5 kB,
#: well within a proxy's usual limit (8 kB).
IDS_PER_LISTING = 50
DEAL_FIELDS = (
    "id,name,stage,amount,amountCurrency,closeDate,accountId,accountName,contactId,contactName,"
    "assignedUserId,assignedUserName,description,createdAt,modifiedAt"
)
EMAIL_FIELDS = (
    "id,name,subject,fromAddress,to,dateSent,status,body,bodyPlain,isHtml,parentType,parentId,"
    "createdAt"
)
#: What reconciliation reads of every deal in the watched stages: what a watch copies.
WATCH_FIELDS = (
    "id,name,stage,amount,amountCurrency,accountName,assignedUserId,assignedUserName,createdAt,"
    "modifiedAt"
)
#: ``total`` of a listing asked with ``X-No-Total``: -1, more pages; -2, no more.
NO_MORE = -2
#: Only which deal an e-mail belongs to, and when it came: what a listing of changes needs.
EMAIL_CHANGE_FIELDS = "id,parentType,parentId,createdAt,modifiedAt,dateSent"
ACTIVITY_FIELDS = "id,name,status,dateStart"
ACTIVITY_CHANGE_FIELDS = "id,name,status,dateStart,parentType,parentId,modifiedAt"
#: What the lead intake reads of a Lead: who the person is, how to reach them, where the lead
#: stands, and when it was created and last changed (docs/vendors.md, Leads).
LEAD_FIELDS = (
    "id,name,firstName,lastName,emailAddress,phoneNumber,accountName,status,source,description,"
    "assignedUserId,createdAt,modifiedAt"
)


def espo_datetime(moment: datetime) -> str:
    """A moment as EspoCRM writes one: UTC, ``YYYY-MM-DD HH:MM:SS``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _changed(since: datetime, parent_type: str | None = "Opportunity") -> dict[str, Any]:
    """``where`` of the records modified after ``since``: by default the activity of
    Opportunities; with ``parent_type`` None, every record (a Lead has no parent)."""
    where = {
        "where[0][type]": "after",
        "where[0][attribute]": "modifiedAt",
        "where[0][value]": espo_datetime(since),
    }
    if parent_type is not None:
        where |= {
            "where[1][type]": "equals",
            "where[1][attribute]": "parentType",
            "where[1][value]": parent_type,
        }
    return where


def hmac_header(*, api_key: str, secret: str, method: str, path: str) -> str:
    """``X-Hmac-Authorization`` for a request; ``path`` is after ``/api/v1``, without query."""
    signed = f"{method.upper()} /{path.lstrip('/')}".encode()
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return base64.b64encode(f"{api_key}:{digest}".encode()).decode()


def api_root(base_url: str) -> str:
    """The REST root of an installation: ``base_url`` with ``/api/v1`` (added if missing)."""
    root = base_url.rstrip("/")
    return root if root.endswith("/" + API_PREFIX) else f"{root}/{API_PREFIX}"


def auth_headers(*, api_key: str, secret: str | None, method: str, path: str) -> dict[str, str]:
    """The authentication of one request: ``X-Api-Key``, or with a secret the HMAC header."""
    if secret:
        signed = hmac_header(api_key=api_key, secret=secret, method=method, path=path)
        return {"X-Hmac-Authorization": signed}
    return {"X-Api-Key": api_key}


def status_reason(response: httpx.Response) -> str:
    """EspoCRM's error message: the ``X-Status-Reason`` header (bodies are empty)."""
    return str(response.headers.get("X-Status-Reason", ""))[:300]


class EspoCrmClient:
    """Typed access to EspoCRM's Opportunity, its e-mails, calls and meetings, its Leads, and
    metadata."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        hmac_secret: str | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Sleep = time.sleep,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        root = api_root(base_url)
        self._api_key = api_key
        self._hmac_secret = hmac_secret
        client = build_client(root, transport=transport, timeouts=timeouts)
        self._http = VendorHttp(client, vendor=VENDOR, message_of=status_reason, sleep=sleep)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.client.close()

    def list_deals(self, *, stages: Sequence[str]) -> DealListing:
        """Every deal in one of ``stages``, with the attributes a watch needs, in id order
        across pages: keyset paging (``id`` after the page's last), which stays as fast on the
        five-hundredth page as on the first, where an offset makes the database count past
        every row before it. A deal entering the stages during the scan may be missed (the
        next run lists it); none is read twice."""
        where = {
            "where[0][type]": "in",
            "where[0][attribute]": "stage",
            "where[0][value][]": list(stages),
        }
        return parse_records(Deal, list(self._keyset("Opportunity", WATCH_FIELDS, where, 1)))

    def list_deals_by_ids(self, *, ids: Sequence[str]) -> DealListing:
        """The deals of ``ids`` that exist, in one listing per ``IDS_PER_LISTING`` ids (an id
        that is not listed was deleted); schema breaks in ``invalid``."""
        records: list[Deal] = []
        invalid: list[SchemaError] = []
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), IDS_PER_LISTING):
            where = {
                "where[0][type]": "in",
                "where[0][attribute]": "id",
                "where[0][value][]": unique[start : start + IDS_PER_LISTING],
            }
            found = self._listing("Opportunity", Deal, DEAL_FIELDS, "createdAt", where)
            records += found.records
            invalid += found.invalid
        return DealListing(records=records, invalid=invalid)

    def get_deal(self, *, deal_id: str) -> Deal:
        """One deal; ``NotFoundError`` if it was deleted, ``SchemaError`` if it broke schema."""
        # One path segment, whatever the id holds: never another endpoint of the API.
        raw = self._http.json(self._get(f"Opportunity/{quote(deal_id, safe='')}", {}))
        listing = parse_records(Deal, [raw])
        if listing.invalid:
            raise listing.invalid[0]
        return listing.records[0]

    def list_emails(self, *, deal_id: str, since: datetime | None = None) -> Listing[Email]:
        """The e-mails of a deal, oldest first; with ``since``, only those sent after it."""
        listing = self._listing(
            f"Opportunity/{quote(deal_id, safe='')}/emails", Email, EMAIL_FIELDS, "dateSent"
        )
        if since is None:
            return listing
        # Filtered here, not with a `where` clause: a deal has few e-mails, and unsent drafts
        # (no dateSent) must not pass a date filter either.
        recent = [e for e in listing.records if e.date_sent is not None and e.date_sent > since]
        return Listing[Email](records=recent, invalid=listing.invalid)

    def list_emails_since(self, *, since: datetime) -> Listing[Email]:
        """Every deal's e-mails modified after ``since``, in one listing (``GET /Email``): what
        changed, whatever the number of deals (docs/vendors.md, "Activity since a moment"). By
        ``modifiedAt``: a draft sent later, or a fetched e-mail linked to the deal later, counts.

        Changes listings are ordered by ``createdAt``, which an edit does not move: a record
        modified while the pages are read can only be read twice, never skipped."""
        return self._listing("Email", Email, EMAIL_CHANGE_FIELDS, "createdAt", _changed(since))

    def list_calls_since(self, *, since: datetime) -> Listing[Call]:
        """Every deal's calls modified after ``since`` (a call marked Held late counts)."""
        return self._listing("Call", Call, ACTIVITY_CHANGE_FIELDS, "createdAt", _changed(since))

    def list_meetings_since(self, *, since: datetime) -> Listing[Meeting]:
        """Every deal's meetings modified after ``since`` (a meeting marked Held late counts)."""
        where = _changed(since)
        return self._listing("Meeting", Meeting, ACTIVITY_CHANGE_FIELDS, "createdAt", where)

    def list_leads_since(self, *, since: datetime) -> Listing[Lead]:
        """Every Lead modified after ``since`` (``GET /Lead``, ``modifiedAt`` after it, to the
        second: EspoCRM keeps no fractions, so the caller reads from a margin before its cursor),
        a Lead created since included (its ``modifiedAt`` is its ``createdAt``), so a lead typed
        into the CRM by hand reaches the lead intake (docs/vendors.md, Leads).

        Ordered by ``createdAt``, which an edit does not move: a Lead edited while the pages are
        read can only be read twice, never skipped. A Lead that breaks the schema is in
        ``invalid``, with its raw record; the others parse."""
        where = _changed(since, parent_type=None)
        return self._listing("Lead", Lead, LEAD_FIELDS, "createdAt", where)

    def list_calls(self, *, deal_id: str) -> Listing[Call]:
        """The calls linked to a deal."""
        return self._listing(
            f"Opportunity/{quote(deal_id, safe='')}/calls", Call, ACTIVITY_FIELDS, "dateStart"
        )

    def list_meetings(self, *, deal_id: str) -> Listing[Meeting]:
        """The meetings linked to a deal."""
        path = f"Opportunity/{quote(deal_id, safe='')}/meetings"
        return self._listing(path, Meeting, ACTIVITY_FIELDS, "dateStart")

    def stage_options(self) -> list[str]:
        """The stage names this installation allows (they are configurable per installation)."""
        key = "entityDefs.Opportunity.fields.stage.options"
        options = self._http.json(self._get("Metadata", {"key": key}))
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise SchemaError(
                vendor=VENDOR, record_id=key, field="options", problem="not a list", raw=options
            )
        return options

    def _listing(
        self,
        path: str,
        model: type[R],
        select: str,
        order_by: str,
        where: dict[str, Any] | None = None,
    ) -> Listing[R]:
        def fetch(index: int) -> tuple[list[Any], bool]:
            offset = index * PAGE_SIZE
            params = {
                "select": select,
                "maxSize": PAGE_SIZE,
                "offset": offset,
                "orderBy": order_by,
                "order": "asc",
                **(where or {}),
            }
            body = self._http.json(self._get(path, params))
            if not isinstance(body, dict) or not isinstance(body.get("list"), list):
                raise SchemaError(
                    vendor=VENDOR, record_id=None, field="list", problem="no list", raw=body
                )
            items: list[Any] = body["list"]
            total = body.get("total")
            if total == -1:  # X-No-Total: -1 means more, -2 no more
                return items, True
            more = isinstance(total, int) and total >= 0 and offset + len(items) < total
            return items, more

        return parse_records(model, list(collect_pages(fetch)))

    def _keyset(self, path: str, select: str, where: dict[str, Any], clause: int) -> Iterator[Any]:
        """Every record of a listing, page after page by ``id`` greater than the last one read
        (``clause`` is the index of that where-clause); no total is counted (``X-No-Total``)."""
        after: str | None = None
        for _ in range(MAX_PAGES):
            params = {"select": select, "maxSize": PAGE_SIZE, "orderBy": "id", "order": "asc"}
            params.update(where)
            if after is not None:
                params[f"where[{clause}][type]"] = "greaterThan"
                params[f"where[{clause}][attribute]"] = "id"
                params[f"where[{clause}][value]"] = after
            body = self._http.json(self._get(path, params, {"X-No-Total": "true"}))
            if not isinstance(body, dict) or not isinstance(body.get("list"), list):
                raise SchemaError(
                    vendor=VENDOR, record_id=None, field="list", problem="no list", raw=body
                )
            items: list[Any] = body["list"]
            yield from items
            if len(items) < PAGE_SIZE or body.get("total") == NO_MORE:
                return
            last = items[-1].get("id") if isinstance(items[-1], dict) else None
            if not isinstance(last, str) or not last:
                raise SchemaError(
                    vendor=VENDOR, record_id=None, field="id", problem="no id", raw=items[-1]
                )
            after = last
        raise PermanentError(f"more than {MAX_PAGES} pages", vendor=VENDOR)

    def _get(
        self, path: str, params: dict[str, Any], extra: dict[str, str] | None = None
    ) -> httpx.Response:
        headers = auth_headers(
            api_key=self._api_key, secret=self._hmac_secret, method="GET", path=path
        )
        return self._http.request("GET", path, params=params, headers={**headers, **(extra or {})})
