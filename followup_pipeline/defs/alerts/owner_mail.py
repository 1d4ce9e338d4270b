"""An academy owner's mail (docs/architecture.md §12): what of their academy waits on the list of
work for them, in their academy's language and zone, written for someone without a terminal.

It goes with the alert about the items (once per alert, ``{alert key}:owner``), to the academy's
owner and backup; the operations list gets the alert itself. Each item says why it waits and,
where a click is safe, carries a signed link (``domain/links.py``): a content version that is
current and not approved can be approved; an open item can be acknowledged (the owner has seen
it and takes care of it). Everything else says whom to ask: the operations owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.domain import links as signed
from followup_pipeline.domain.academy_mail import OwnerLine, Rendered, render_owner, why_text
from followup_pipeline.domain.academy_words import Language, language_of, moment_text
from followup_pipeline.domain.work import CATCH_UP_KINDS, Selection
from followup_pipeline.engine.mailer import LockableDatabase, Mailer, MailResult
from followup_pipeline.machine import links_url
from followup_pipeline.settings import Settings
from followup_pipeline.store import links, lms, lms_content, lms_learners
from followup_pipeline.store import lms_certificates as certs
from followup_pipeline.store import work as work_store
from followup_pipeline.store.lms import Tenant
from followup_pipeline.store.lms_certificates import CertificateRow
from followup_pipeline.store.lms_content import ContentRow
from followup_pipeline.store.work import WorkItem


@dataclass(frozen=True)
class _Known:
    """What one owner's mail reads once: the academy, its words and links, and the content and
    certificates its items name, by their keys."""

    tenant: Tenant
    language: Language
    keys: list[signed.LinkKey]
    base: str
    content: dict[str, ContentRow]
    certificates: dict[str, CertificateRow]


def owner_key(alert_key: str) -> str:
    """The ledger key of the owner's mail that goes with the alert ``alert_key``."""
    return f"{alert_key}:owner"


class OwnerMail:
    """The owners' mails of one alert run."""

    def __init__(
        self, postgres: LockableDatabase, mailer: Mailer, settings: Settings, now: datetime
    ) -> None:
        self.postgres = postgres
        self.mailer = mailer
        self.settings = settings
        self.now = now

    def send(self, alert_key: str, item_ids: list[int]) -> MailResult | None:
        """Mail the academy's owner what of ``item_ids`` still waits (None: nothing to mail —
        no academy item, all closed, or the academy names no owner of its own)."""
        with self.postgres.connection() as conn:
            selected = work_store.select(conn, Selection(ids=tuple(item_ids)))
            items = [i for i in selected if i.kind in CATCH_UP_KINDS and i.tenant_id]
            tenant_id = items[0].tenant_id if items else None
            tenant = lms.tenant(conn, tenant_id) if tenant_id else None
            if tenant is None or not tenant.owner:
                return None
            mail = self.render(conn, tenant, items)
        to = [a for a in (tenant.owner, tenant.backup) if a and "@" in a]
        if not to:
            return None
        return self.mailer.send_once(
            key=owner_key(alert_key), kind="alert", to=to, subject=mail.subject,
            html=mail.html, text=mail.text, payload={"work_items": item_ids},
        )  # fmt: skip

    def render(
        self, conn: psycopg.Connection[Any], tenant: Tenant, items: list[WorkItem]
    ) -> Rendered:
        """The mail: each item's line, its links made (once)."""
        kinds = {item.kind for item in items}
        # What the items name, read once for the mail (not once per item).
        known = _Known(
            tenant=tenant,
            language=language_of(tenant.language),
            keys=links.link_keys(self.settings),
            base=links_url(self.settings),
            content=(
                {r.idempotency_key: r for r in lms_content.rows(conn, tenant.id)}
                if "publication" in kinds
                else {}
            ),
            certificates=(
                {r.idempotency_key: r for r in certs.rows(conn, tenant.id)}
                if "certificate" in kinds
                else {}
            ),
        )
        language = known.language
        lines = []
        until: list[datetime] = []
        with conn.transaction():
            for item in items:
                lines.append(self._line(conn, known, item, until))
        ops = self.settings.ops_owner
        return render_owner(
            academy=tenant.name, language=language, zone=tenant.time_zone, lines=lines, ops=ops,
            links_until=min(until) if until else None,
        )  # fmt: skip

    def _line(
        self, conn: psycopg.Connection[Any], known: _Known, item: WorkItem, until: list[datetime]
    ) -> OwnerLine:
        tenant, language, keys, base = known.tenant, known.language, known.keys, known.base

        def link(purpose: signed.Purpose, subject: str, **bound: Any) -> str:
            issued = links.issue(conn, purpose, subject, tenant.id, at=self.now, **bound)
            until.append(issued.expires_at)
            return signed.url(base, purpose, signed.sign(keys, purpose, issued.id))

        key = item.action_key or ""
        approve = None
        why = why_text(language, "other", what=item.what)
        label = why_text(language, "label_other")
        if item.kind == "publication":
            row = known.content.get(key)
            if row is not None:
                when = moment_text(row.publish_at, tenant.time_zone, language)
                values = {"title": row.title, "version": str(row.version), "when": when}
                waits = row.current and row.approved_at is None and row.state == "waiting"
                why = why_text(language, "publication" if waits else "publication_late", **values)
                label = why_text(language, "label_publication", title=row.title)
                if waits:
                    approve = link("approve", key, content_id=row.content_id, version=row.version)
        elif item.kind == "reminder":
            reminder = lms_learners.reminder_of_key(conn, key)
            if reminder is not None:
                who = reminder.learner_name or f"#{reminder.learner_id}"
                why = why_text(language, "reminder", learner=who, quiz=reminder.quiz_name or "")
                label = why_text(language, "label_reminder", learner=who)
        elif item.kind == "certificate":
            certificate = known.certificates.get(key)
            if certificate is not None:
                who = certificate.learner_name or f"#{certificate.learner_id}"
                why = why_text(language, "certificate", learner=who)
                label = why_text(language, "label_certificate", learner=who)
        acknowledge = None
        if item.state == "open":
            subject = f"work:{item.id}:{item.failures}"
            acknowledge = link("acknowledge", subject, work_item_id=item.id)
        return OwnerLine(why, item.opened_at, approve, acknowledge, label)
