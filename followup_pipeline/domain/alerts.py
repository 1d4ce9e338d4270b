"""What makes two failures the same alert: a fingerprint of the job, the error's type and its
message with numbers and ids normalised, and the window an alert of it is sent in. Pure code."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta

#: Parts of a message that differ between repeats of one failure.
VOLATILE = (
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (re.compile(r"\b[0-9a-f]{12,}\b", re.I), "<id>"),
    (
        re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([+-]\d{2}:?\d{2}|Z)?"),
        "<time>",
    ),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)
MAX_MESSAGE = 200


def normalised(message: str) -> str:
    """The first line of ``message`` with ids, times and numbers replaced, spaces collapsed."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    for pattern, placeholder in VOLATILE:
        first = pattern.sub(placeholder, first)
    return " ".join(first.split())[:MAX_MESSAGE]


def fingerprint(job: str, error_type: str, message: str) -> str:
    """The same for repeats of one failure, different for different failures."""
    return f"{job}|{error_type}|{normalised(message)}"


def window_of(at: datetime, window: timedelta) -> datetime:
    """The start of the alerting window ``at`` falls in (windows counted from the Unix epoch)."""
    seconds = int(window.total_seconds())
    start = int(at.timestamp()) // seconds * seconds
    return datetime.fromtimestamp(start, tz=UTC)


def alert_key(fingerprint_text: str, at: datetime, window: timedelta) -> str:
    """The ledger key of a run-failure alert: its fingerprint's hash and its window."""
    digest = hashlib.sha256(fingerprint_text.encode()).hexdigest()[:16]
    return f"alert:run:{digest}:{window_of(at, window):%Y%m%dT%H%M}"
