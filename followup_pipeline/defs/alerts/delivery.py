"""How an alert reaches a person: one mail to the operations owner and backup through Graph,
sent once per ledger key (``engine/mailer.py``); when mail fails, or nobody is set to receive it,
a task in the operations list in ClickUp (``board.py``), also once per key (``{key}:clickup``).
An alert about an academy's items is followed by its owner's own mail (``owner_mail.py``,
``{key}:owner``). All go out the engine's one way (``engine/effects.py``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Literal

from followup_pipeline.defs.alerts.board import NEVER_DEAD, AlertNotSent, OpsBoard, clickup_key
from followup_pipeline.defs.alerts.owner_mail import OwnerMail
from followup_pipeline.domain.alerts import AlertMail, is_dead_letter_digest, render_alert
from followup_pipeline.engine.ledger import DryRun
from followup_pipeline.engine.mailer import LockableDatabase, Mailer, MailError
from followup_pipeline.engine.scope import RunScope
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.machine import ui_url
from followup_pipeline.settings import Settings
from followup_pipeline.store import alerts as store
from followup_pipeline.store import work as work_store
from followup_pipeline.store.run_lock import RunLock

Channel = Literal["mail", "clickup", "in_flight", "suppressed", "items_closed"]


@dataclass(frozen=True)
class Delivered:
    """How one alert went: by mail, as a ClickUp task, or left to the run sending it now."""

    key: str
    channel: Channel
    reason: str = ""
    #: Why the academy owner's own mail that goes with it failed ("": it went, or none is due).
    owner_failed: str = ""


class AlertDelivery:
    """Delivers the alerts of one run."""

    def __init__(
        self,
        run: RunScope,
        postgres: LockableDatabase,
        outlook: OutlookClient,
        board: ClickUpClient | None,
        settings: Settings,
    ) -> None:
        self.run = run
        self.postgres = postgres
        self.settings = settings
        self.log = run.log
        # A dry run holds alerts too: its mails and tasks are recorded suppressed (dry_run).
        self.mailer = Mailer(run, postgres, outlook, settings, max_attempts=NEVER_DEAD)
        self.ops = OpsBoard(run, postgres, board, settings) if board is not None else None
        self.owners = OwnerMail(postgres, self.mailer, settings, run.now)

    def _ambiguous(self, key: str) -> bool:
        """Whether the mail of ``key`` may have gone (its action says ``unknown``)."""
        return self.mailer.ledger.prior(key).maybe_done

    @staticmethod
    def _mailed(key: str, outcome: str) -> Delivered:
        if outcome == "in_flight":
            return Delivered(key, "in_flight", "its mail may still be on its way")
        if outcome == "suppressed":
            return Delivered(key, "suppressed", "dry run: recorded, not sent")
        return Delivered(key, "mail", outcome)

    def render(self, key: str) -> tuple[AlertMail, list[int]]:
        """The mail of the alert ``key`` and the ids of the rows it is about."""
        with self.postgres.connection() as conn:
            rows = store.rows_of(conn, key)
            since = store.held_since(conn, key)
        if not rows:
            raise AlertNotSent(f"{key}: no such alert")
        mail = render_alert(
            [row.item() for row in rows],
            held=rows[0].held,
            held_since=since,
            ui_url=ui_url(self.settings),
            zone=self.settings.timezone,
            digest=is_dead_letter_digest(key),
        )
        return mail, [row.id for row in rows]

    def deliver(self, key: str) -> Delivered:
        """Send the alert ``key`` by mail, else as a ClickUp task; ``AlertNotSent`` when neither
        took it. Two runs of one alert at once: the second leaves it to the first."""
        owner = self.run.run_id or "alert"
        lock = RunLock.try_take(self.postgres.url, f"alert:{key}", owner=owner)
        try:
            if not lock.held:
                return Delivered(key, "in_flight", f"another run is sending it ({lock.holder})")
            delivered = self._deliver(key)
            if delivered.channel in ("mail", "clickup"):
                failed = self._to_owner(key)
                if failed:
                    return replace(delivered, owner_failed=failed)
            return delivered
        finally:
            lock.release()

    def _to_owner(self, key: str) -> str:
        """An alert about an academy's items: its owner's own mail, in their words; why it
        failed ("": it went, or none is due). The operations list has the alert either way, and
        the run that sees the failure ends partial, which alerts in turn."""
        with self.postgres.connection() as conn:
            about = store.work_items_of(conn, key)
        if not about:
            return ""
        try:
            self.owners.send(key, about)
        except MailError as error:
            self.log.warning("%s: the academy owner's mail failed: %s", key, error)
            return str(error)
        return ""

    def _deliver(self, key: str) -> Delivered:
        mail, ids = self.render(key)
        with self.postgres.connection() as conn:
            about = store.work_items_of(conn, key)
            closed = work_store.closed_among(conn, about) if about else set()
        if (
            about
            and closed == set(about)
            and self.mailer.skip(key=key, kind="alert", reason="superseded")
        ):
            # Every item it is about was closed before it reached anyone: it goes nowhere.
            return Delivered(key, "items_closed", "every item it was about is closed")
        if self.mailer.ledger.prior(clickup_key(key)).done:
            return Delivered(key, "clickup", "sent before")
        with self.postgres.connection() as conn:
            also = store.also_to(conn, key)
        recipients = self.settings.ops_recipients()
        recipients += [a for a in also if a.lower() not in {r.lower() for r in recipients}]
        if recipients:
            send = partial(
                self.mailer.send_once,
                key=key,
                kind="alert",
                to=recipients,
                subject=mail.subject,
                html=mail.html,
                payload={"alerts": ids},
            )
            try:
                result = send()
            except MailError as error:
                reason = f"mail failed: {error}"
                if self._ambiguous(key):
                    # It may have gone (a 5xx or timeout after the request): wait out its
                    # window and ask Sent Items before a second channel doubles it.
                    try:
                        result = send(resend=False)
                    except MailError as unsettled:
                        reason = f"mail failed, and did not arrive: {unsettled}"
                    else:
                        return self._mailed(key, result.outcome)
            else:
                return self._mailed(key, result.outcome)
        else:
            reason = "FOLLOWUP_OPS_OWNER and FOLLOWUP_OPS_BACKUP are not set"
        self.log.warning("%s: %s; trying the operations list in ClickUp", key, reason)
        if self.ops is None:
            raise AlertNotSent(f"{key}: {reason}, and FOLLOWUP_OPS_CLICKUP_LIST_ID is not set")
        note = f"\nThis alert came here because {reason}.\n"
        try:
            self.ops.post_once(clickup_key(key), name=mail.subject, markdown=mail.markdown + note)
        except DryRun:
            return Delivered(key, "suppressed", "dry run: recorded, not sent")
        return Delivered(key, "clickup", reason)
