"""Injected faults: what can go wrong at each vendor, for whom, how often and for how long.

A fault is a ``FaultSpec`` posted to ``POST /_sandbox/faults``. Kinds:

- ``error``: answer ``status`` (default 500) in the vendor's error shape; ``rate`` < 1 makes
  it an error rate.
- ``outage``: answer ``status`` (default 503) to everything for ``seconds``.
- ``rate_limit``: answer 429 (a burst of ``count`` of them, or all while active).
- ``latency``: wait ``latency_s`` before answering (webhooks: before delivering); with
  ``applied`` the work is done (committed) first and only the answer waits: a process killed
  meanwhile dies after the vendor accepted and before it heard so.
- ``malformed``: answer the real status with a truncated body.
- ``drop_answer``: do the work (commit), then drop the connection without a full answer.
- ``apply_then_error``: do the work (commit), then answer ``status`` (default 500) in the
  vendor's error shape, as a vendor that fails after its write does.
- ``invalid_output`` (Mistral): the model answers ``content`` (default: not the asked format).
- ``drop`` / ``duplicate`` (webhooks): an item is never sent / a batch is sent twice.
- ``reorder`` (webhooks): a flush sends its due items newest first, as a queue whose older
  items wait for a retry does.

Filters: ``path`` (a regular expression searched in the path below the vendor's prefix),
``method``, ``deal_id`` (found in the path, query or body; for webhooks the item's id),
``function`` (Moodle: the web-service function a request calls, its ``wsfunction``).
"""

import itertools
import random
import re
import time
from dataclasses import dataclass, field
from typing import Literal, Self

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from followup_pipeline.sandbox.errors import ESPO_ERROR_STATUSES

Vendor = Literal[
    "espocrm", "clickup", "graph", "mistral", "pdl", "moodle", "accredible", "webhooks"
]
FaultKind = Literal[
    "error",
    "outage",
    "rate_limit",
    "latency",
    "malformed",
    "drop_answer",
    "apply_then_error",
    "invalid_output",
    "drop",
    "duplicate",
    "reorder",
]

_HTTP_KINDS = {
    "error",
    "outage",
    "rate_limit",
    "latency",
    "malformed",
    "drop_answer",
    "apply_then_error",
}
ALLOWED_KINDS: dict[str, set[str]] = {
    "espocrm": _HTTP_KINDS - {"rate_limit"},  # EspoCRM has no 429 and no rate limiting
    "clickup": _HTTP_KINDS,
    "graph": _HTTP_KINDS,
    "mistral": _HTTP_KINDS | {"invalid_output"},
    "pdl": _HTTP_KINDS,  # People Data Labs (company lookup)
    "moodle": _HTTP_KINDS - {"rate_limit"},  # Moodle has no rate limiting
    "accredible": _HTTP_KINDS,  # the credential platform
    "webhooks": {"drop", "duplicate", "latency", "reorder"},
}


#: The HTTP errors a Moodle site answers with: its web server's or PHP's 5xx, and 403 when the
#: REST protocol is disabled; Moodle's own errors are HTTP 200 (``sandbox/moodle.py``).
MOODLE_ERROR_STATUSES = frozenset({403, 500, 502, 503, 504})


class DroppedAnswer(httpx.RemoteProtocolError):
    """Raised inside the app after the work is done so that the server drops the connection.

    It subclasses httpx's transport error so that a client driving the app through
    ``httpx.ASGITransport`` sees the same exception family as over a real socket.
    """

    def __init__(self) -> None:
        super().__init__("Server disconnected without sending a complete response (sandbox fault).")


class FaultSpec(BaseModel):
    """One fault to inject; see the module docstring for the kinds and filters."""

    model_config = ConfigDict(extra="forbid")

    vendor: Vendor
    kind: FaultKind
    status: int | None = Field(default=None, ge=400, le=599)
    rate: float = Field(default=1.0, ge=0.0, le=1.0)
    count: int | None = Field(default=None, ge=1)
    seconds: float | None = Field(default=None, gt=0)
    latency_s: float = Field(default=0.0, ge=0.0, le=120.0)
    applied: bool = False
    retry_after: int = Field(default=1, ge=0)
    path: str | None = None
    method: str | None = None
    deal_id: str | None = None
    content: str | None = None
    function: str | None = None

    @model_validator(mode="after")
    def _fits_vendor(self) -> Self:
        if self.kind not in ALLOWED_KINDS[self.vendor]:
            allowed = ", ".join(sorted(ALLOWED_KINDS[self.vendor]))
            raise ValueError(f"{self.vendor} has no fault {self.kind!r}; allowed: {allowed}")
        espo = self.vendor == "espocrm"
        if espo and self.status is not None and self.status not in ESPO_ERROR_STATUSES:
            raise ValueError(f"EspoCRM answers errors only with {sorted(ESPO_ERROR_STATUSES)}")
        moodle = self.vendor == "moodle"
        if moodle and self.status is not None and self.status not in MOODLE_ERROR_STATUSES:
            raise ValueError(
                f"a Moodle site answers HTTP errors only with {sorted(MOODLE_ERROR_STATUSES)} "
                "(its own errors are HTTP 200)"
            )
        if self.function is not None and not moodle:
            raise ValueError("function filters Moodle's requests only")
        if self.path is not None:
            re.compile(self.path)
        return self

    def answer_status(self) -> int:
        """The status an ``error``, ``outage`` or ``rate_limit`` fault answers with."""
        if self.kind == "rate_limit":
            return 429
        return self.status or (503 if self.kind == "outage" else 500)


@dataclass
class Fault:
    """An active fault: its spec, when it started and how often it fired."""

    id: str
    spec: FaultSpec
    started: float = field(default_factory=time.monotonic)
    hits: int = 0

    def expired(self, now: float) -> bool:
        """Whether its window or its count is used up."""
        spec = self.spec
        if spec.seconds is not None and now - self.started > spec.seconds:
            return True
        return spec.count is not None and self.hits >= spec.count

    def describe(self) -> dict[str, object]:
        """The fault as the control API shows it."""
        return {"id": self.id, "hits": self.hits, **self.spec.model_dump(exclude_none=True)}


class FaultBook:
    """The active faults, and the decision which of them fire for one request."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._faults: dict[str, Fault] = {}
        self._ids = itertools.count(1)

    def add(self, spec: FaultSpec) -> Fault:
        """Activate a fault."""
        fault = Fault(id=f"fault-{next(self._ids)}", spec=spec)
        self._faults[fault.id] = fault
        return fault

    def remove(self, fault_id: str) -> bool:
        """Deactivate one fault; False if unknown."""
        return self._faults.pop(fault_id, None) is not None

    def clear(self) -> None:
        """Deactivate every fault."""
        self._faults.clear()

    def active(self) -> list[Fault]:
        """The faults still in force."""
        now = time.monotonic()
        for fault_id in [f.id for f in self._faults.values() if f.expired(now)]:
            del self._faults[fault_id]
        return list(self._faults.values())

    def fire(
        self, vendor: str, method: str, path: str, text: str, kinds: set[str] | None = None
    ) -> list[Fault]:
        """The faults (of ``kinds``) that hit this request, each counted; ``text`` holds query
        and body."""
        fired = []
        for fault in self.active():
            spec = fault.spec
            if spec.vendor != vendor or (kinds is not None and spec.kind not in kinds):
                continue
            if spec.method is not None and spec.method.upper() != method.upper():
                continue
            if spec.path is not None and re.search(spec.path, path) is None:
                continue
            if spec.deal_id is not None and spec.deal_id not in path and spec.deal_id not in text:
                continue
            if spec.function is not None and not _calls(text, spec.function):
                continue
            if spec.rate < 1.0 and self._rng.random() >= spec.rate:
                continue
            fault.hits += 1
            fired.append(fault)
        return fired


def _calls(text: str, function: str) -> bool:
    """Whether a request's query and form body (``text``) call the web-service ``function``."""
    pattern = rf"(?<![\w%])wsfunction={re.escape(function)}(?![\w%])"
    return re.search(pattern, text) is not None
