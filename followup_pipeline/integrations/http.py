"""The one HTTP policy of the vendor clients: timeouts, bounded retries, error mapping, paging.

Only idempotent requests (GET, and PUT that sets a value) are retried, on 429, 5xx, timeouts and
connection errors, with exponential backoff and jitter, honouring ``Retry-After`` (seconds or an
HTTP date) and ClickUp's ``X-RateLimit-Reset`` (Unix seconds). A create (POST) is never retried
here: the action ledger decides, and a timeout after sending is reported as ``ambiguous``.
"""

import functools
import logging
import random
import ssl
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import httpx

from followup_pipeline.integrations.errors import (
    IntegrationError,
    NotFoundError,
    PermanentError,
    TransientError,
)

log = logging.getLogger(__name__)

#: Seconds to open a connection, to wait for a response, to send a body, to get a pooled socket.
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
WRITE_TIMEOUT = 30.0
POOL_TIMEOUT = 5.0


@dataclass(frozen=True)
class Timeouts:
    """A client's timeouts (settings ``FOLLOWUP_VENDOR_TIMEOUT_S`` and ``_CONNECT_TIMEOUT_S``):
    ``read_s`` to wait for an answer and to send a body, ``connect_s`` to connect or to get a
    pooled connection."""

    read_s: float = READ_TIMEOUT
    connect_s: float = CONNECT_TIMEOUT

    def httpx(self) -> httpx.Timeout:
        """As httpx takes them."""
        return httpx.Timeout(
            self.read_s, connect=self.connect_s, write=self.read_s, pool=self.connect_s
        )

    @property
    def whole_s(self) -> float:
        """The longest one request can take before the client gives up: pool, connect, write
        and read, each at its limit."""
        return 2 * self.connect_s + 2 * self.read_s


DEFAULT_TIMEOUTS = Timeouts()

#: Attempts for one idempotent request, the first included.
MAX_ATTEMPTS = 4
#: First backoff in seconds; doubles per attempt, with jitter.
BACKOFF_BASE = 0.5
#: The longest single wait. ClickUp's rate window is a minute and its reset (absolute Unix
#: seconds) is rounded up, so an honest reset fits with a few seconds left for clock skew.
#: A vendor asking for more makes us give up now, with ``retry_after`` saying when to return.
MAX_RETRY_WAIT = 65.0
#: Safety bound on paging, so a vendor that never says "last page" cannot loop forever.
MAX_PAGES = 10_000

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

Sleep = Callable[[float], None]
Clock = Callable[[], float]
MessageOf = Callable[[httpx.Response], str]
T = TypeVar("T")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of every vendor client, made once per process: each new client would
    load the CA bundle again (tens of milliseconds; a client per run, tenant and vendor)."""
    return httpx.create_ssl_context()


def build_client(
    base_url: str,
    *,
    headers: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> httpx.Client:
    """An ``httpx.Client`` with ``timeouts``; ``transport`` lets tests stand in."""
    return httpx.Client(
        base_url=base_url.rstrip("/") + "/",
        headers=dict(headers or {}),
        timeout=timeouts.httpx(),
        transport=transport,
        verify=tls_context(),
    )


def retry_after_seconds(response: httpx.Response, *, now: float) -> float | None:
    """The wait the vendor asked for, from ``Retry-After`` or ``X-RateLimit-Reset``, if any."""
    value = response.headers.get("Retry-After")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - now)
        except (TypeError, ValueError):
            pass
    reset = response.headers.get("X-RateLimit-Reset")
    if reset:
        try:
            return max(0.0, float(reset) - now)
        except ValueError:
            pass
    return None


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with jitter for the ``attempt``-th retry (0-based), capped."""
    ceiling = min(MAX_RETRY_WAIT, BACKOFF_BASE * 2.0**attempt)
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not security


def error_for_status(
    response: httpx.Response, *, vendor: str, message: str, now: float
) -> IntegrationError:
    """The project's error for a failed response, given the vendor's own message."""
    status = response.status_code
    text = f"HTTP {status} on {response.request.method} {response.request.url.path}"
    if message:
        text += f": {message}"
    if status in RETRYABLE_STATUSES:
        return TransientError(
            text, vendor=vendor, status=status, retry_after=retry_after_seconds(response, now=now)
        )
    if status == 404:
        return NotFoundError(text, vendor=vendor, status=status, vendor_message=message)
    return PermanentError(text, vendor=vendor, status=status, vendor_message=message)


class VendorHttp:
    """Sends requests for one vendor under the retry policy and maps failures to our errors."""

    def __init__(
        self,
        client: httpx.Client,
        *,
        vendor: str,
        message_of: MessageOf,
        sleep: Sleep = time.sleep,
        clock: Clock = time.time,
    ) -> None:
        self.client = client
        self.vendor = vendor
        self._message_of = message_of
        self._sleep = sleep
        self._clock = clock

    def json(self, response: httpx.Response, *, ambiguous: bool = False) -> Any:
        """The answer's JSON. A body that is not JSON (truncated, not UTF-8, nested past the
        parser's depth) is a ``TransientError``, ambiguous when the request was a create: the
        vendor may have done it, so the ledger settles it by search."""
        try:
            return response.json()
        except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
            raise TransientError(
                f"{self.vendor} answered with a body that is not JSON "
                f"({type(error).__name__}, {len(response.content)} bytes)",
                vendor=self.vendor,
                status=response.status_code,
                ambiguous=ambiguous,
            ) from None

    def request(
        self,
        method: str,
        url: str,
        *,
        params: Any = None,
        json: Any = None,
        data: Mapping[str, str] | None = None,
        content: str | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
        answers: Collection[int] = (),
    ) -> httpx.Response:
        """Send one request; return a 2xx response (or one of ``answers``, statuses the caller
        reads itself, e.g. EspoCRM's 409 with the duplicates) or raise an ``IntegrationError``."""
        retry = method.upper() in IDEMPOTENT_METHODS if idempotent is None else idempotent
        attempts = MAX_ATTEMPTS if retry else 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self.client.request(
                    method,
                    url,
                    params=params,
                    json=json,
                    data=data,
                    content=content,
                    headers=headers,
                )
            except httpx.TransportError as exc:
                lost = self._transport_error(method, url, exc, retry=retry)
                if last:
                    raise lost from exc
                self._wait(backoff_delay(attempt), lost)
                continue
            if response.is_success or response.status_code in answers:
                return response
            error = self.error_for(response)
            if not retry and isinstance(error, TransientError):
                # A 5xx or 429 to a create was received: the vendor may have done the work
                # before it failed. The ledger settles it by searching, never by sending again.
                error.ambiguous = True
            if last or not isinstance(error, TransientError):
                raise error
            wait = error.retry_after if error.retry_after is not None else backoff_delay(attempt)
            if wait > MAX_RETRY_WAIT:
                raise error
            self._wait(wait, error)
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def error_for(self, response: httpx.Response) -> IntegrationError:
        """Map a failed response with this vendor's message."""
        return error_for_status(
            response, vendor=self.vendor, message=self._message_of(response), now=self._clock()
        )

    def _transport_error(
        self, method: str, url: str, exc: httpx.TransportError, *, retry: bool
    ) -> TransientError:
        # A request that never left (no connection, no pooled socket) cannot have had an effect.
        unsent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
        ambiguous = not retry and not unsent
        what = "outcome unknown" if ambiguous else "not sent" if unsent else "no answer"
        return TransientError(
            f"{type(exc).__name__} on {method.upper()} {url} ({what})",
            vendor=self.vendor,
            ambiguous=ambiguous,
        )

    def _wait(self, seconds: float, error: IntegrationError) -> None:
        log.warning("%s; retrying in %.1f s", error, seconds)
        self._sleep(seconds)


def collect_pages(fetch: Callable[[int], tuple[list[T], bool]]) -> Iterator[T]:
    """Yield every item of a paged listing; ``fetch(page_index)`` returns ``(items, more)``."""
    for index in range(MAX_PAGES):
        items, more = fetch(index)
        yield from items
        if not more or not items:
            return
    raise PermanentError(f"more than {MAX_PAGES} pages", vendor="paging")
