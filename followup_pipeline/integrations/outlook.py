"""Microsoft Graph client: an app-only token and ``sendMail`` from one mailbox.

The token (client credentials, no refresh token) is cached until five minutes before it expires.
``sendMail`` answers 202: accepted, not delivered. It is a POST and never retried blindly; the one
exception is a 401 with a cached token, where nothing was sent: fetch a new token, send once more.
``sendMail`` takes a JSON message (custom headers named ``X-…`` only) or, in its MIME form, a whole
RFC 5322 message, which may carry any header (``List-Unsubscribe``; docs/vendors.md).
"""

import base64
import email.policy
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict

from followup_pipeline.integrations.errors import PermanentError, SchemaError
from followup_pipeline.integrations.http import (
    DEFAULT_TIMEOUTS,
    Clock,
    Sleep,
    Timeouts,
    VendorHttp,
    build_client,
)

VENDOR = "graph"
GRAPH_SCOPE = "https://graph.microsoft.com/.default"
API_VERSION = "v1.0"
#: Fetch a new token this many seconds before the cached one expires.
TOKEN_MARGIN = 300.0


#: The extended property that carries the ledger key on a sent message (a GUID of our own).
KEY_PROPERTY = "String {6d0a5c3e-8f1b-4e5a-9a52-2f7e4c1b9d10} Name FollowupKey"
#: The header that carries the ledger key on a message sent as MIME (``send_mime``).
HEADER_KEY = "X-Followup-Key"
#: Exchange's named property for that header: PS_INTERNET_HEADERS, named after the header
#: (MS-OXCMAIL 2.2.3.2.29), found with the same ``$filter`` as ``KEY_PROPERTY``.
HEADER_KEY_PROPERTY = "String {00020386-0000-0000-C000-000000000046} Name X-Followup-Key"

#: An RFC 5322 field name: printable US-ASCII but the colon.
_FIELD_NAME = re.compile(r"[!-9;-~]+")
#: Headers ``send_mime`` writes itself (``Content-*`` too), and ``From``, which Graph sets.
_OWN_HEADERS = frozenset({"to", "subject", "from", "mime-version", HEADER_KEY.lower()})
#: A key the header carries as it is: visible US-ASCII, one line (RFC 5322's 998 octets).
_KEY_TEXT = re.compile(r"[!-~]{1,900}")
#: CRLF line ends, and no folding below RFC 5322's line limit: the default policy folds at 78
#: and turns a long unbroken ASCII value (a ``List-Unsubscribe`` URL, the key) into RFC 2047
#: encoded-words, which a List-Unsubscribe reader and the key lookup would not take as sent.
_MIME_POLICY = email.policy.SMTP.clone(max_line_length=998)
#: A draft's MIME (``send_multipart``): no folding below the line limit either (a long subject
#: stays one header line), its text as written (LF line ends, as its readers compare it).
_DRAFT_POLICY = email.policy.default.clone(max_line_length=998)


def graph_scope(graph_url: str) -> str:
    """The ``.default`` scope of the Graph cloud at ``graph_url``; a stand-in gets the public."""
    parts = urlsplit(graph_url)
    if parts.hostname and parts.hostname.startswith("graph.microsoft"):
        return f"{parts.scheme}://{parts.netloc}/.default"
    return GRAPH_SCOPE


def graph_message(response: httpx.Response) -> str:
    """Graph's ``{"error": {"code", "message"}}``, or the token endpoint's ``error_description``."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        return response.text[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{error.get('code')}: {error.get('message')}"
    if isinstance(error, str):
        return f"{error}: {str(body.get('error_description', ''))[:300]}"
    return response.text[:300]


class SendReceipt(BaseModel):
    """Graph accepted the message (202); delivery is not confirmed."""

    model_config = ConfigDict(frozen=True)

    accepted_at: datetime
    recipients: list[str]
    request_id: str | None = None


@dataclass(frozen=True)
class _Token:
    value: str
    expires_at: float


class OutlookClient:
    """Sends HTML mail as ``sender`` through Microsoft Graph with an app-only token."""

    def __init__(
        self,
        login_url: str,
        graph_url: str,
        tenant_id: str,
        client_id: str,
        client_secret: str,
        sender: str,
        transport: httpx.BaseTransport | None = None,
        clock: Clock | None = None,
        sleep: Sleep = time.sleep,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self._clock = clock or time.time
        root = graph_url.rstrip("/")
        if not root.endswith("/" + API_VERSION):
            root = f"{root}/{API_VERSION}"
        self._login = VendorHttp(
            build_client(login_url, transport=transport, timeouts=timeouts),
            vendor=VENDOR,
            message_of=graph_message,
            sleep=sleep,
            clock=self._clock,
        )
        self._graph = VendorHttp(
            build_client(root, transport=transport, timeouts=timeouts),
            vendor=VENDOR,
            message_of=graph_message,
            sleep=sleep,
            clock=self._clock,
        )
        self._token_path = f"{tenant_id}/oauth2/v2.0/token"
        self._form = {
            "client_id": client_id,
            "client_secret": client_secret,
            "scope": graph_scope(graph_url),
            "grant_type": "client_credentials",
        }
        self.sender = sender
        self._token: _Token | None = None

    def close(self) -> None:
        """Close both connection pools."""
        self._login.client.close()
        self._graph.client.close()

    def access_token(self) -> str:
        """A valid app-only token, from the cache while it has five minutes left."""
        cached = self._cached_token()
        if cached is not None:
            return cached
        now = self._clock()
        # Asking for a token has no side effect, so this POST may be retried.
        body = self._login.request("POST", self._token_path, data=self._form, idempotent=True)
        payload = self._login.json(body)
        try:
            self._token = _Token(str(payload["access_token"]), now + float(payload["expires_in"]))
        except (KeyError, TypeError, ValueError):
            fields = sorted(payload) if isinstance(payload, dict) else []
            raise SchemaError(
                vendor=VENDOR,
                record_id="token",
                field="access_token/expires_in",
                problem="missing or malformed",
                raw=fields,  # the field names only: the body may hold a token
            ) from None
        return self._token.value

    def _cached_token(self) -> str | None:
        if self._token is not None and self._clock() < self._token.expires_at - TOKEN_MARGIN:
            return self._token.value
        return None

    def send_mail(
        self,
        *,
        to: list[str],
        subject: str,
        html: str,
        headers: Mapping[str, str] | None = None,
        key: str | None = None,
    ) -> SendReceipt:
        """Send one HTML message; ``headers`` become ``internetMessageHeaders`` (``X-`` names).

        ``key`` travels on the message as an extended property (kept in Sent Items), so that
        ``find_sent`` can tell whether a send whose answer was lost went out (docs/vendors.md).
        """
        for name in headers or {}:
            if not name.lower().startswith("x-"):
                raise ValueError(f"Graph accepts only custom headers named X-…, not {name!r}")
        message: dict[str, object] = {
            "subject": subject,
            "body": {"contentType": "HTML", "content": html},
            "toRecipients": [{"emailAddress": {"address": address}} for address in to],
            "internetMessageHeaders": [
                {"name": name, "value": value} for name, value in (headers or {}).items()
            ],
        }
        if key is not None:
            message["singleValueExtendedProperties"] = [{"id": KEY_PROPERTY, "value": key}]
        body = {"message": message, "saveToSentItems": True}
        response = self._send_with_fresh_token_on_401(lambda: self._send(json=body))
        return SendReceipt(
            accepted_at=datetime.fromtimestamp(self._clock(), tz=UTC),
            recipients=list(to),
            request_id=response.headers.get("request-id"),
        )

    def send_multipart(
        self,
        *,
        to: list[str],
        subject: str,
        html: str,
        text: str,
        key: str,
        before_send: Callable[[], None] | None = None,
    ) -> SendReceipt:
        """Send one message with a plain-text and an HTML part (multipart/alternative).

        Graph's JSON ``sendMail`` carries one body, so the message is created as a draft from
        MIME (``Content-Type: text/plain``, base64), given ``key`` as an extended property (MIME
        cannot carry one), and then sent. Only the last request sends: a failure before it
        leaves at most a draft, which ``find_sent`` does not count. ``before_send`` is called
        just before that request (the caller's in-flight window starts there). ``From`` is left
        to Graph, which sets the mailbox's own address.
        """
        mime = EmailMessage(policy=_DRAFT_POLICY)
        mime["To"] = ", ".join(to)
        mime["Subject"] = subject
        mime.set_content(text)
        mime.add_alternative(html, subtype="html")
        raw = base64.b64encode(mime.as_bytes()).decode("ascii")
        auth = {"Authorization": f"Bearer {self.access_token()}"}
        drafts = f"users/{self.sender}/messages"
        created = self._graph.request(
            "POST", drafts, content=raw, headers={**auth, "Content-Type": "text/plain"}
        )
        draft = self._graph.json(created)
        draft_id = draft.get("id") if isinstance(draft, dict) else None
        if not isinstance(draft_id, str) or not draft_id:
            raise SchemaError(
                vendor=VENDOR, record_id=key, field="id", problem="no draft id", raw=draft
            )
        path = f"{drafts}/{quote(draft_id, safe='')}"
        properties = {"singleValueExtendedProperties": [{"id": KEY_PROPERTY, "value": key}]}
        self._graph.request("PATCH", path, json=properties, headers=auth, idempotent=True)
        if before_send is not None:
            before_send()
        response = self._graph.request("POST", f"{path}/send", headers=auth, idempotent=False)
        return SendReceipt(
            accepted_at=datetime.fromtimestamp(self._clock(), tz=UTC),
            recipients=list(to),
            request_id=response.headers.get("request-id"),
        )

    def send_mime(
        self,
        *,
        to: list[str],
        subject: str,
        html: str,
        text: str,
        key: str,
        headers: Mapping[str, str] | None = None,
    ) -> SendReceipt:
        """Send one message with a plain-text and an HTML part through ``sendMail``'s MIME form.

        The whole RFC 5322 message is posted, base64, with ``Content-Type: text/plain``; unlike
        the JSON form it may carry any header (``List-Unsubscribe``, ``List-Unsubscribe-Post``).
        ``key`` travels as the header ``X-Followup-Key``, which Exchange keeps as a named property
        (``HEADER_KEY_PROPERTY``): ``find_sent(key, properties=(HEADER_KEY_PROPERTY,))`` finds
        the message. A header whose name or value Graph would not carry as given (CR or LF, not
        an RFC 5322 field name, one the message sets itself) and a key that is not one line of
        visible ASCII are a ``ValueError`` before any request. One request sends; as with
        ``send_mail``, only a 401 to a cached token is tried again, with a fresh one.
        """
        mime = _mime_message(to=to, subject=subject, html=html, text=text, key=key, headers=headers)
        raw = base64.b64encode(mime.as_bytes()).decode("ascii")
        response = self._send_with_fresh_token_on_401(
            lambda: self._send(content=raw, content_type="text/plain")
        )
        return SendReceipt(
            accepted_at=datetime.fromtimestamp(self._clock(), tz=UTC),
            recipients=list(to),
            request_id=response.headers.get("request-id"),
        )

    def find_sent(self, key: str, *, properties: Sequence[str] = (KEY_PROPERTY,)) -> str | None:
        """The id of the sender's message (in any folder: Sent Items, Outbox) that carries
        ``key``, if any (drafts do not count). Needs a mail read permission (``Mail.ReadWrite``,
        which the drafts of ``send_multipart`` need anyway) besides ``Mail.Send``.

        ``properties`` are the extended properties that may carry the key (``KEY_PROPERTY`` set
        by ``send_mail``/``send_multipart``, ``HEADER_KEY_PROPERTY`` by ``send_mime``), looked
        up in turn, one request each, until one finds the message."""
        for prop in properties:
            found = self._find_by(prop, key)
            if found is not None:
                return found
        return None

    def _find_by(self, prop: str, key: str) -> str | None:
        # OData string literals: a quote doubled.
        prop, value = prop.replace("'", "''"), key.replace("'", "''")
        params = {
            "$filter": (
                f"singleValueExtendedProperties/Any(ep: ep/id eq '{prop}' "
                f"and ep/value eq '{value}')"
            ),
            "$select": "id,subject,sentDateTime,isDraft",
            "$top": "10",
        }
        headers = {"Authorization": f"Bearer {self.access_token()}"}
        # Every folder of the mailbox, not Sent Items alone: a message Exchange has accepted but
        # not yet sent (throttled) waits in the Outbox, and must count as sent all the same.
        path = f"users/{self.sender}/messages"
        response = self._graph.request("GET", path, params=params, headers=headers)
        found = self._graph.json(response)
        values = found.get("value") if isinstance(found, dict) else None
        if not isinstance(values, list):
            raise SchemaError(
                vendor=VENDOR, record_id=key, field="value", problem="not a list", raw=found
            )
        # A draft left by a send that failed before its last request was never sent.
        sent = [v for v in values if isinstance(v, dict) and not v.get("isDraft")]
        return str(sent[0].get("id")) if sent else None

    def _send_with_fresh_token_on_401(self, send: Callable[[], httpx.Response]) -> httpx.Response:
        cached = self._cached_token() is not None
        try:
            return send()
        except PermanentError as exc:
            if exc.status != 401 or not cached:
                raise
            # A 401 means Graph refused before sending: a fresh token may send once more.
            self._token = None
            return send()

    def _send(
        self, *, json: object = None, content: str | None = None, content_type: str | None = None
    ) -> httpx.Response:
        """One ``sendMail`` request (a JSON message, or ``content`` of ``content_type``), never
        retried: a 5xx or 429 may have sent it."""
        headers = {"Authorization": f"Bearer {self.access_token()}"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        return self._graph.request(
            "POST",
            f"users/{self.sender}/sendMail",
            json=json,
            content=content,
            headers=headers,
            idempotent=False,
        )


def _check_header(name: str, value: str) -> None:
    if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
        raise ValueError(f"header {name!r}: a name or value may not hold CR or LF")
    if not _FIELD_NAME.fullmatch(name):
        raise ValueError(f"header {name!r}: not an RFC 5322 field name")
    lowered = name.lower()
    if lowered in _OWN_HEADERS or lowered.startswith("content-"):
        raise ValueError(f"header {name!r}: the message sets it itself")


def _mime_message(
    *,
    to: list[str],
    subject: str,
    html: str,
    text: str,
    key: str,
    headers: Mapping[str, str] | None,
) -> EmailMessage:
    """The message ``send_mime`` posts; ``ValueError`` for a header or key it cannot carry."""
    extra = dict(headers or {})
    seen: set[str] = set()
    for name, value in extra.items():
        _check_header(name, value)
        if name.lower() in seen:
            raise ValueError(f"header {name!r}: given twice")
        seen.add(name.lower())
    if not _KEY_TEXT.fullmatch(key):
        raise ValueError(f"{HEADER_KEY} {key!r}: the key must be one line of visible ASCII")
    mime = EmailMessage(policy=_MIME_POLICY)
    mime["To"] = ", ".join(to)
    mime["Subject"] = subject
    for name, value in [*extra.items(), (HEADER_KEY, key)]:
        mime[name] = value
        # The policy reads a value as it would a received one: "=?…?=" would be decoded.
        if str(mime[name]) != value:
            raise ValueError(f"header {name!r}: its value would not be sent as given")
    mime.set_content(text)
    mime.add_alternative(html, subtype="html")
    return mime
