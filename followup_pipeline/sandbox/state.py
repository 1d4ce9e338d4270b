"""Everything the sandbox remembers: the CRM's records, ClickUp's tasks, the outbox, counters."""

import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from followup_pipeline.sandbox.clock import Clock
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.faults import FaultBook
from followup_pipeline.sandbox.senders import Senders
from followup_pipeline.sandbox.webhooks import WebhookDispatcher

Record = dict[str, Any]


#: The entity an EspoCRM path names (``/api/v1/Lead/…`` → ``Lead``).
ESPO_ENTITY = re.compile(r"/api/v1/([A-Za-z]+)")


@dataclass
class RateWindow:
    """A fixed request window: its end (Unix seconds) and how many requests it has seen."""

    ends_at: float
    used: int = 0


@dataclass
class SandboxState:
    """The mutable world behind the vendor doubles."""

    config: SandboxConfig
    rng: random.Random = field(init=False)
    clock: Clock = field(init=False)
    faults: FaultBook = field(init=False)
    webhooks: WebhookDispatcher = field(init=False)
    #: The site form's and the payment provider's webhooks (``senders.py``).
    senders: Senders = field(init=False)
    deals: dict[str, Record] = field(default_factory=dict)
    activities: dict[str, dict[str, list[Record]]] = field(default_factory=dict)
    leads: dict[str, Record] = field(default_factory=dict)
    tasks: dict[str, Record] = field(default_factory=dict)
    comments: dict[str, list[Record]] = field(default_factory=dict)
    outbox: list[Record] = field(default_factory=list)
    #: Draft messages by id (created from MIME, not sent yet): Graph's ``…/messages`` folder view.
    drafts: dict[str, Record] = field(default_factory=dict)
    #: The Graph tenant's mailboxes (``config.graph_mailboxes``, and those added since).
    mailboxes: list[str] = field(default_factory=list)
    #: Every chat-completion request body Mistral received, as sent (what left the machine).
    model_requests: list[Record] = field(default_factory=list)
    #: The Moodle sites' worlds by site name (``moodle_demo.py``): courses, users, enrolments,
    #: quizzes, completions, attempts and the messages sent, as plain JSON (``persist.py``).
    moodle: dict[str, Record] = field(default_factory=dict)
    #: Accredible's credentials by id (``accredible.py``), as plain JSON (``persist.py``).
    credentials: dict[str, Record] = field(default_factory=dict)
    tokens: dict[str, float] = field(default_factory=dict)
    rate_windows: dict[str, RateWindow] = field(default_factory=dict)
    stats: dict[str, Counter[str]] = field(default_factory=dict)
    #: Requests that may change something (not GET or HEAD), by vendor, method and EspoCRM
    #: entity: ``{"espocrm": {"POST Lead": 2}}`` (what reached the vendor, whatever it answered).
    writes: dict[str, Counter[str]] = field(default_factory=dict)
    #: The state file's lock (``persist.claim``), held while the sandbox runs.
    lock_fd: int | None = None

    def __post_init__(self) -> None:
        self.clock = Clock(self.config.start)
        self.rng = random.Random(self.config.seed)
        self.faults = FaultBook(self.rng)
        self.webhooks = WebhookDispatcher(self.config, self.rng, self.faults, self.clock)
        self.senders = Senders(self.config, self.clock, self.webhooks)
        self.mailboxes[:] = self.config.graph_mailboxes

    def reset(self, seed: int | None = None) -> None:
        """Forget every record (the Moodle sites' too), fault, counter, queued webhook and sent
        form or payment, and the mailboxes added since the start; re-seed the random source and
        put the clock back."""
        self.rng.seed(self.config.seed if seed is None else seed)
        self.clock.reset(self.config.start)
        stores = (self.deals, self.activities, self.leads, self.tasks, self.comments, self.tokens)
        for store in stores:
            store.clear()
        self.outbox.clear()
        self.drafts.clear()
        self.mailboxes[:] = self.config.graph_mailboxes
        self.model_requests.clear()
        self.moodle.clear()
        self.credentials.clear()
        self.rate_windows.clear()
        self.stats.clear()
        self.writes.clear()
        self.faults.clear()
        self.webhooks.reset()
        self.senders.reset()

    def new_id(self, length: int = 17) -> str:
        """A random lowercase hex id, 17 characters like EspoCRM's by default."""
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(length))

    def count(self, vendor: str, status: int) -> None:
        """Count one answered request of ``vendor`` with ``status``."""
        self.stats.setdefault(vendor, Counter())[str(status)] += 1

    def count_write(self, vendor: str, method: str, path: str) -> None:
        """Count one request of ``vendor`` that may change something (any method but GET and
        HEAD), by method and, for EspoCRM, the entity its path names."""
        if method in ("GET", "HEAD"):
            return
        entity = ESPO_ENTITY.search(path)
        key = f"{method} {entity[1]}" if entity else method
        self.writes.setdefault(vendor, Counter())[key] += 1

    def take_rate(self, key: str, limit: int, window_s: float) -> tuple[bool, int, int]:
        """Spend one request of ``key``'s window: (allowed, remaining, reset in Unix seconds)."""
        now = time.time()
        window = self.rate_windows.get(key)
        if window is None or window.ends_at <= now:
            window = RateWindow(ends_at=now + window_s)
            self.rate_windows[key] = window
        window.used += 1
        allowed = window.used <= limit
        return allowed, max(0, limit - window.used), int(window.ends_at + 0.999)

    def activity(self, deal_id: str, kind: str) -> list[Record]:
        """The e-mails, calls or meetings (``kind``) linked to a deal."""
        return self.activities.setdefault(deal_id, {}).setdefault(kind, [])
