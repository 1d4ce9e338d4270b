"""The signed links' rows (``links``, ``domain/links.py``) and their use: what a click does, in
one transaction with its audit entry and the stored click (``events``, source ``link``) marked
done — a learner's opt-out, an approval of a content version that is still current, an
acknowledgement of an item still open. A link past its expiry, or single-use and spent, or whose
version was superseded, changes nothing and says why."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg

from followup_pipeline.domain.links import (
    SINGLE_USE,
    TTL,
    LinkKey,
    Purpose,
    key_name,
    new_link_id,
    parse_keys,
)
from followup_pipeline.settings import Settings
from followup_pipeline.store import audit, events, lms, lms_content
from followup_pipeline.store import work as work_store
from followup_pipeline.store.db import fetch_one
from followup_pipeline.store.queries import query

#: The source of a stored click in ``events``.
SOURCE = "link"

#: The machine's own link key when ``FOLLOWUP_LINK_KEYS`` names none (made once, kept).
LINK_KEY_FILE = "link-keys"


def link_keys(settings: Settings) -> list[LinkKey]:
    """The keys that sign and verify the links in mails (``domain/links.py``): those of
    ``FOLLOWUP_LINK_KEYS``, else one made once in ``FOLLOWUP_HOME/link-keys`` (owner-only), so
    that a machine on one disk needs none configured and its links outlive a restart."""
    if settings.link_keys is not None:
        return parse_keys(settings.link_keys.get_secret_value())
    path = settings.home / LINK_KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_urlsafe(48)
        line = f"{key_name(secret)}:{secret}\n"
        draft = path.with_name(f".{LINK_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(line)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(draft, path)  # whole or not at all; the first process's key wins
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return parse_keys(path.read_text(encoding="utf-8").strip())


Outcome = Literal["done", "already", "expired", "superseded", "unknown"]


@dataclass(frozen=True)
class Link:
    """A link's row, with its tenant's name and language."""

    id: str
    purpose: str
    subject: str
    tenant_id: str
    learner_id: int | None
    content_id: str | None
    version: int | None
    work_item_id: int | None
    expires_at: datetime
    created_at: datetime
    used_at: datetime | None
    uses: int
    tenant_name: str = ""
    language: str = "en"
    learner_lang: str | None = None
    #: The content's title (an approval's link).
    title: str | None = None


@dataclass(frozen=True)
class Used:
    """What a click did: its outcome and the link (None: no such link)."""

    outcome: Outcome
    link: Link | None
    detail: str = ""


@dataclass(frozen=True)
class Issued:
    """A link as a mail carries it: its id and until when it works."""

    id: str
    expires_at: datetime


def issue(
    conn: psycopg.Connection[Any],
    purpose: Purpose,
    subject: str,
    tenant_id: str,
    *,
    at: datetime,
    learner_id: int | None = None,
    content_id: str | None = None,
    version: int | None = None,
    work_item_id: int | None = None,
) -> Issued:
    """The link for ``purpose`` on ``subject`` (an action's key), made once; one not used yet
    works for its whole time from ``at``."""
    params = {
        "id": new_link_id(),
        "purpose": purpose,
        "subject": subject,
        "tenant_id": tenant_id,
        "learner_id": learner_id,
        "content_id": content_id,
        "version": version,
        "work_item_id": work_item_id,
        "expires_at": at + TTL[purpose],
        "at": at,
    }
    issued = fetch_one(conn, Issued, query("links_issue"), params)
    assert issued is not None  # an upsert answers its row
    return issued


def id_of(conn: psycopg.Connection[Any], purpose: Purpose, subject: str) -> str | None:
    """The id of the link made for ``purpose`` on ``subject``, if one was."""
    row = conn.execute(query("links_of_subject"), {"purpose": purpose, "subject": subject})
    found = row.fetchone()
    return None if found is None else str(found["id"])


def find(conn: psycopg.Connection[Any], id_: str) -> Link | None:
    """The link ``id_``, or None."""
    return fetch_one(conn, Link, query("links_find"), {"id": id_})


def click_body(id_: str, purpose: Purpose) -> bytes:
    """What a click's event keeps: the link's id and its purpose, nothing personal and nothing
    the sender chose (the same click twice is one event: the body's dedup)."""
    return json.dumps({"link": id_, "purpose": purpose}, sort_keys=True).encode()


def use(conn: psycopg.Connection[Any], id_: str, *, at: datetime, event_id: int | None) -> Used:
    """Apply a click on the link ``id_`` (its MAC verified) in one transaction: the change, the
    link's use, its audit entry, and the click's event done."""
    with conn.transaction():
        link = fetch_one(conn, Link, query("links_lock"), {"id": id_})
        used = _apply(conn, link, at) if link is not None else Used("unknown", None)
        if link is not None:
            if used.outcome == "done":
                conn.execute(query("links_used"), {"id": link.id, "at": at})
            audit.record(
                conn,
                actor=_actor(link),
                action="link.used" if used.outcome == "done" else "link.refused",
                subject=f"link:{link.id}",
                detail=f"{link.purpose} {_bound(link)}: {used.outcome}"
                + (f" ({used.detail})" if used.detail else "")
                + (f"; event:{event_id}" if event_id is not None else ""),
                at=at,
            )
        if event_id is not None:
            events.mark_done(conn, event_id)
    return used


def _actor(link: Link) -> str:
    if link.purpose == "opt_out":
        return f"learner {link.learner_id} of {link.tenant_id} (one-click link)"
    return f"owner of {link.tenant_id} (signed link)"


def _bound(link: Link) -> str:
    if link.purpose == "opt_out":
        return f"learner:{link.tenant_id}:{link.learner_id}"
    if link.purpose == "approve":
        return f"content:{link.tenant_id}:{link.content_id} v{link.version}"
    return f"work:{link.work_item_id}"


def _apply(conn: psycopg.Connection[Any], link: Link, at: datetime) -> Used:
    if at >= link.expires_at:
        return Used("expired", link)
    purpose: Purpose = link.purpose  # type: ignore[assignment]  # the table's check
    if SINGLE_USE[purpose] and link.uses > 0:
        return Used("already", link, "the link was used before")
    if purpose == "opt_out":
        assert link.learner_id is not None  # the table's check
        if lms.opted_out(conn, link.tenant_id, link.learner_id, "all"):
            return Used("already", link, "opted out before")
        lms.opt_out(conn, link.tenant_id, link.learner_id, "all")
        audit.record(conn, actor=_actor(link), action="lms.opt_out", at=at,
                     subject=f"learner:{link.tenant_id}:{link.learner_id}",
                     detail="no more reminders (all), by the learner's one-click link")  # fmt: skip
        return Used("done", link)
    if purpose == "approve":
        return _approve(conn, link, at)
    return _acknowledge(conn, link, at)


def _approve(conn: psycopg.Connection[Any], link: Link, at: datetime) -> Used:
    assert link.content_id is not None  # the table's check
    assert link.version is not None
    row = lms_content.lock(conn, link.tenant_id, link.content_id, link.version)
    if row is None:
        return Used("unknown", link, "no such version")
    if not row.current:
        return Used("superseded", link, f"version {row.current_version} is current")
    if row.approved_at is not None or row.state != "waiting":
        return Used("already", link, f"it is {row.state}, approved by {row.approved_by}")
    by = _actor(link)
    lms_content.approve(conn, link.tenant_id, link.content_id, link.version, by=by, at=at)
    audit.record(conn, actor=by, action="content.approve", at=at,
                 subject=f"content:{link.tenant_id}:{link.content_id}",
                 detail=f"v{link.version} approved by signed link")  # fmt: skip
    return Used("done", link)


def _acknowledge(conn: psycopg.Connection[Any], link: Link, at: datetime) -> Used:
    assert link.work_item_id is not None  # the table's check
    by = _actor(link)
    work_store.lock(conn)
    if not work_store.acknowledge(conn, [link.work_item_id], by=by, at=at):
        return Used("already", link, "the item is no longer open")
    audit.record(conn, actor=by, action="work.acknowledge", at=at,
                 subject=f"work:{link.work_item_id}", reason="by signed link")  # fmt: skip
    return Used("done", link)


@dataclass(frozen=True)
class Pending:
    """What applying the stored clicks did: applied, and failed (each error named)."""

    applied: int
    errors: list[str]


def apply_pending(conn: psycopg.Connection[Any], *, older_than: datetime) -> Pending:
    """Apply each click stored before ``older_than`` and not applied (its apply died with the
    ingress, or the database went away), each in its own transaction, judged at the moment it
    was clicked; one the ingress is applying now is left to it."""
    rows = conn.execute(query("links_pending"), {"older_than": older_than}).fetchall()
    applied, errors = 0, []
    for row in rows:
        try:
            record = json.loads(bytes(row["body"]))
            id_ = str(record["link"])
        except (ValueError, KeyError, TypeError):
            id_ = ""  # not a click's body: ``use`` of no link marks it done
        try:
            with conn.transaction():
                taken = conn.execute(query("links_event_take"), {"id": row["id"]}).fetchone()
                if taken is None:
                    continue
                use(conn, id_, at=row["received_at"], event_id=int(row["id"]))
        except psycopg.Error as error:
            errors.append(f"event:{row['id']}: {type(error).__name__}: {error}")
            continue
        applied += 1
    return Pending(applied, errors)


def opt_in(conn: psycopg.Connection[Any], tenant_id: str, learner_id: int) -> list[str]:
    """The learner wants reminders again: the opt-outs removed (their types)."""
    params = {"tenant_id": tenant_id, "learner_id": learner_id}
    return [str(r["action_type"]) for r in conn.execute(query("lms_opt_in"), params).fetchall()]
