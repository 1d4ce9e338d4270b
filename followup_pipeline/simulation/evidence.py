"""What the invariants of a simulation look at besides the database: the vendors' side as the
sandbox holds it (ClickUp's tasks, the mails Graph took, the Moodle sites' messages, Accredible's
credentials, EspoCRM's Leads), read once; the shape of an invariant's verdict; and the helpers
the invariants share (rows as dicts, what a dead letter is).

The sandbox's control API (``/_sandbox``) shows ClickUp, the outbox, Moodle and Accredible whole.
EspoCRM's Leads have no control route: they are read as the machine reads them, through the CRM's
REST API at the settings' URL with the settings' key (in a simulation: the sandbox), 200 a page.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, LiteralString

import httpx
import psycopg
from psycopg.rows import dict_row

from followup_pipeline.integrations.clickup import KEY_TAG_PREFIX, key_tag
from followup_pipeline.integrations.espocrm import api_root, auth_headers
from followup_pipeline.integrations.outlook import HEADER_KEY_PROPERTY, KEY_PROPERTY
from followup_pipeline.settings import Settings

#: The sandbox's control API: ``control("GET", "/outbox")`` is the JSON of ``/_sandbox/outbox``.
Control = Callable[[str, str], Any]
#: Violations an invariant names at most; the rest are counted in one more line.
SHOWN = 5
#: EspoCRM's largest page.
CRM_PAGE = 200
#: The mark of a reminder's key in a Moodle message's text (``defs/lms/remind.py``).
MOODLE_MARK = re.compile(r"\bref (fu-[0-9a-f]{16})\b")


@dataclass(frozen=True)
class Invariant:
    """One invariant checked at the end of a simulation."""

    name: str
    holds: bool
    #: How many things it looked at (so that a vacuous pass shows).
    checked: int
    #: The first violations, each naming its record; ``… and N more`` when there were more.
    broken: tuple[str, ...]


@dataclass(frozen=True)
class ReportWindow:
    """A report window the simulation expects to have been sent or skipped: the job and its
    partition key (``morning_report`` and a business day, ``weekly_report`` and a Friday)."""

    job: str
    partition: str


def verdict(name: str, checked: int, broken: Sequence[str]) -> Invariant:
    """The invariant ``name``: it holds when nothing is broken; the first violations shown."""
    shown = tuple(broken[:SHOWN])
    if len(broken) > SHOWN:
        shown += (f"… and {len(broken) - SHOWN} more",)
    return Invariant(name, not broken, checked, shown)


@dataclass(frozen=True)
class Task:
    """A ClickUp task and the key marks it carries: the custom field's value, ``fu-`` tags."""

    id: str
    field_key: str | None
    tags: frozenset[str]

    def marks(self) -> list[str]:
        """Every key mark of the task, as ``field:<key>`` and ``tag:<fu-…>``."""
        found = [f"field:{self.field_key}"] if self.field_key else []
        return found + [f"tag:{tag}" for tag in sorted(self.tags)]


@dataclass(frozen=True)
class Mail:
    """A message Graph took (the sandbox's outbox): the key it carries, its recipients."""

    id: str
    key: str | None
    to: frozenset[str]


@dataclass(frozen=True)
class Credential:
    """A credential Accredible holds now (a lost one is gone from it)."""

    id: str
    account: str
    group_id: int
    email: str
    license_id: str | None


@dataclass(frozen=True)
class CrmLead:
    """A Lead in EspoCRM."""

    id: str
    email: str | None


@dataclass(frozen=True)
class Evidence:
    """The vendors' side at the end of a simulation."""

    tasks: tuple[Task, ...] = ()
    mails: tuple[Mail, ...] = ()
    #: How many mails carry each ledger key.
    mail_keys: Mapping[str, int] = field(default_factory=dict)
    #: How many Moodle messages carry each reminder's mark (every site's).
    moodle_marks: Mapping[str, int] = field(default_factory=dict)
    credentials: tuple[Credential, ...] = ()
    crm_leads: tuple[CrmLead, ...] = ()

    def carrying(self, key: str) -> list[Task]:
        """The tasks that carry the idempotency key ``key``."""
        by_field = self.by_mark.get(f"field:{key}", [])
        by_tag = [t for t in self.by_mark.get(f"tag:{key_tag(key)}", []) if t not in by_field]
        return by_field + by_tag

    @cached_property
    def by_mark(self) -> dict[str, list[Task]]:
        """The tasks of each key mark (``Task.marks``)."""
        found: dict[str, list[Task]] = {}
        for task in self.tasks:
            for mark in task.marks():
                found.setdefault(mark, []).append(task)
        return found

    def mail_count(self, key: str) -> int:
        """How many mails carry the ledger key ``key``."""
        return self.mail_keys.get(key, 0)

    def mails_with(self, key: str) -> list[Mail]:
        """The mails that carry ``key``."""
        return [mail for mail in self.mails if mail.key == key]


def rows(
    conn: psycopg.Connection[Any], sql: LiteralString, params: Mapping[str, object] | None = None
) -> list[dict[str, Any]]:
    """The rows of a query as dicts, whatever row factory ``conn`` has."""
    with conn.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(sql, params or {}).fetchall()


def is_dead(row: Mapping[str, Any], max_attempts: int) -> bool:
    """Whether a ledger row (``outcome``, ``attempts``, ``replayed_attempts``) is a dead letter:
    failed ``max_attempts`` times since its last replay (``store/ledger.py``)."""
    return (
        row["outcome"] == "failed"
        and int(row["attempts"]) - int(row["replayed_attempts"] or 0) >= max_attempts
    )


def gather(control: Control, settings: Settings) -> Evidence:
    """Read what the vendors hold now: the sandbox's state, and the CRM's Leads."""
    listed = control("GET", "/clickup/tasks")
    messages = control("GET", "/outbox")["messages"]
    marks: Counter[str] = Counter()
    for site in control("GET", "/moodle")["sites"]:
        for message in control("GET", f"/moodle/{site['site']}/messages")["messages"]:
            mark = moodle_mark(message)
            if mark is not None:
                marks[mark] += 1
    credentials = control("GET", "/accredible/credentials")["credentials"]
    mails = tuple(_mail(raw) for raw in messages)
    return Evidence(
        tasks=tuple(_task(raw, settings.clickup_key_field_id) for raw in listed["tasks"]),
        mails=mails,
        mail_keys=dict(Counter(mail.key for mail in mails if mail.key is not None)),
        moodle_marks=dict(marks),
        credentials=tuple(_credential(raw) for raw in credentials),
        crm_leads=tuple(crm_leads(settings)),
    )


def _task(raw: Mapping[str, Any], key_field_id: str | None) -> Task:
    field_key = None
    if key_field_id is not None:
        for custom in raw.get("custom_fields") or []:
            if custom.get("id") == key_field_id and isinstance(custom.get("value"), str):
                field_key = custom["value"]
    tags = frozenset(
        str(tag.get("name"))
        for tag in raw.get("tags") or []
        if str(tag.get("name", "")).startswith(KEY_TAG_PREFIX)
    )
    return Task(str(raw["id"]), field_key, tags)


def _mail(raw: Mapping[str, Any]) -> Mail:
    message = raw.get("message") or {}
    properties = message.get("singleValueExtendedProperties") or []
    # The key as a property (JSON sendMail, drafts) or as its X-Followup-Key header (MIME).
    ids = {KEY_PROPERTY.lower(), HEADER_KEY_PROPERTY.lower()}
    keys = [p.get("value") for p in properties if str(p.get("id", "")).lower() in ids]
    recipients = message.get("toRecipients") or []
    addresses = (str(r.get("emailAddress", {}).get("address", "")) for r in recipients)
    return Mail(
        id=str(raw.get("id")),
        key=str(keys[0]) if keys else None,
        to=frozenset(address.strip().lower() for address in addresses),
    )


def moodle_mark(message: Mapping[str, Any]) -> str | None:
    """The reminder mark a Moodle message carries: its ``clientmsgid``, else the mark in its
    text."""
    given = message.get("clientmsgid")
    if isinstance(given, str) and given:
        return given
    found = MOODLE_MARK.search(str(message.get("fullmessage") or message.get("text") or ""))
    return found[1] if found else None


def _credential(raw: Mapping[str, Any]) -> Credential:
    license_id = raw.get("license_id")
    return Credential(
        id=str(raw["id"]),
        account=str(raw.get("account")),
        group_id=int(raw["group_id"]),
        email=str(raw.get("recipient_email") or "").strip().lower(),
        license_id=str(license_id) if license_id is not None else None,
    )


def crm_leads(settings: Settings) -> Iterable[CrmLead]:
    """Every Lead of the CRM, oldest first, paged as EspoCRM allows; none without an API key."""
    if settings.espocrm_api_key is None:
        return []
    secret = settings.espocrm_hmac_secret
    headers = auth_headers(
        api_key=settings.espocrm_api_key.get_secret_value(),
        secret=secret.get_secret_value() if secret is not None else None,
        method="GET",
        path="Lead",
    )
    found: dict[str, CrmLead] = {}  # by id: a Lead on two pages (one order, ties) is one
    offset = 0
    with httpx.Client(base_url=api_root(str(settings.espocrm_url)), timeout=30) as client:
        while True:
            params: dict[str, str | int] = {
                "select": "id,emailAddress",
                "orderBy": "createdAt",
                "order": "asc",
                "maxSize": CRM_PAGE,
                "offset": offset,
            }
            answer = client.get("/Lead", params=params, headers=headers)
            answer.raise_for_status()
            page = answer.json()["list"]
            for raw in page:
                found[str(raw["id"])] = CrmLead(str(raw["id"]), raw.get("emailAddress") or None)
            offset += len(page)
            if len(page) < CRM_PAGE:
                return list(found.values())
