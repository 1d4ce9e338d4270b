"""The shared HTTP policy: waits asked for by vendors, backoff, retries and paging."""

from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest

from followup_pipeline.integrations import http
from followup_pipeline.integrations.errors import NotFoundError, PermanentError, TransientError

NOW = 1_800_000_000.0


def vendor_http(
    handler: Callable[[httpx.Request], httpx.Response], sleeps: list[float]
) -> http.VendorHttp:
    client = http.build_client("http://vendor.test", transport=httpx.MockTransport(handler))
    return http.VendorHttp(
        client, vendor="test", message_of=lambda r: r.text, sleep=sleeps.append, clock=lambda: NOW
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        (
            {"Retry-After": format_datetime(datetime.fromtimestamp(NOW + 12, UTC), usegmt=True)},
            12.0,
        ),
        ({"X-RateLimit-Reset": str(int(NOW + 20))}, 20.0),
        ({"X-RateLimit-Reset": str(int(NOW - 5))}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_seconds_reads_each_header_form(
    headers: dict[str, str], expected: float | None
) -> None:
    response = httpx.Response(429, headers=headers)
    assert http.retry_after_seconds(response, now=NOW) == expected


def test_backoff_delay_grows_and_stays_capped() -> None:
    assert 0.25 <= http.backoff_delay(0) <= 0.5
    assert 0.5 <= http.backoff_delay(1) <= 1.0
    assert http.backoff_delay(30) <= http.MAX_RETRY_WAIT


def test_request_retries_get_until_success(sleeps: list[float]) -> None:
    answers = iter([httpx.Response(503), httpx.Response(429, headers={"Retry-After": "3"})])
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return next(answers, httpx.Response(200, json={"ok": True}))

    response = vendor_http(handler, sleeps).request("GET", "thing")
    assert response.json() == {"ok": True}
    assert len(calls) == 3
    assert sleeps[1] == 3.0


def test_request_gives_up_after_max_attempts(sleeps: list[float]) -> None:
    with pytest.raises(TransientError) as caught:
        vendor_http(lambda _: httpx.Response(500, text="boom"), sleeps).request("GET", "thing")
    assert caught.value.status == 500
    assert len(sleeps) == http.MAX_ATTEMPTS - 1


def test_request_does_not_wait_beyond_the_cap(sleeps: list[float]) -> None:
    long_wait = httpx.Response(429, headers={"Retry-After": "3600"})
    with pytest.raises(TransientError) as caught:
        vendor_http(lambda _: long_wait, sleeps).request("GET", "thing")
    assert caught.value.retry_after == 3600.0
    assert sleeps == []


@pytest.mark.parametrize(
    ("exc", "ambiguous"),
    [(httpx.ReadTimeout("slow"), True), (httpx.ConnectError("refused"), False)],
)
def test_request_never_retries_a_post(
    sleeps: list[float], exc: httpx.TransportError, ambiguous: bool
) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise exc

    with pytest.raises(TransientError) as caught:
        vendor_http(handler, sleeps).request("POST", "things", json={})
    assert len(calls) == 1
    assert caught.value.ambiguous is ambiguous


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, PermanentError), (401, PermanentError), (404, NotFoundError), (502, TransientError)],
)
def test_error_for_status_maps_each_class(status: int, kind: type[Exception]) -> None:
    response = httpx.Response(status, request=httpx.Request("GET", "http://vendor.test/x"))
    error = http.error_for_status(response, vendor="test", message="why", now=NOW)
    assert type(error) is kind
    assert "why" in str(error)


def test_collect_pages_stops_on_last_page() -> None:
    pages = {0: ([1, 2], True), 1: ([3], False)}
    assert list(http.collect_pages(lambda i: pages[i])) == [1, 2, 3]
