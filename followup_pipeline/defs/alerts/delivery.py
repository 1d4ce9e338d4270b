"""How an alert reaches a person: one mail to the operations owner and backup through Graph,
sent once per ledger key (``Mailer``); when mail fails, or nobody is set to receive it, a task in
the operations list in ClickUp (``OpsBoard``), also once per key (``{key}:clickup``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Literal

from followup_pipeline.domain.alerts import AlertMail, is_dead_letter_digest, render_alert
from followup_pipeline.engine.ledger import ActionLedger, DryRun
from followup_pipeline.engine.mailer import LockableDatabase, Mailer, MailError
from followup_pipeline.engine.scope import Database, RunScope
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.errors import IntegrationError, TransientError
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.machine import ui_url
from followup_pipeline.settings import Settings
from followup_pipeline.store import alerts as store
from followup_pipeline.store.ledger import ActionSpec
from followup_pipeline.store.run_lock import RunLock

Channel = Literal["mail", "clickup", "in_flight", "suppressed"]
#: The tag every alert task carries in the operations list.
ALERT_TAG = "followup-alert"


class AlertNotSent(RuntimeError):
    """Neither channel took the alert; the next ``alert`` run tries again."""


def clickup_key(key: str) -> str:
    """The ledger key of an alert's ClickUp task."""
    return f"{key}:clickup"


class OpsBoard:
    """Tasks in the operations list, created at most once per ledger key (its key travels as a
    tag and is searched before any create)."""

    def __init__(
        self, run: RunScope, db: Database, board: ClickUpClient, settings: Settings
    ) -> None:
        self.run = run
        self.board = board
        self.settings = settings
        self.ledger = ActionLedger.of(db, run, settings)

    def post_once(self, key: str, *, name: str, markdown: str) -> str:
        """The task id of ``key``'s task, created unless it exists; ``AlertNotSent`` when
        ClickUp fails or an earlier create may still be on its way; ``DryRun`` in a dry run."""
        prior = self.ledger.prior(key)
        if prior.done and prior.action is not None:
            return prior.action.provider_ref or ""
        if self.ledger.in_flight(prior):
            raise AlertNotSent(f"{key}: the last create may still be on its way")
        zone = self.settings.timezone
        spec = ActionSpec(key=key, kind="alert", due_at=self.run.now, time_zone=zone)
        attempt = self.ledger.begin(spec)
        if attempt is None:
            return ""  # another run created it meanwhile
        try:
            found = self.board.find_tasks_by_key(idempotency_key=key)
            if found:
                self.ledger.finish(attempt, "confirmed", provider_ref=found[0].id)
                return found[0].id
            self.ledger.touch(attempt)  # the in-flight window starts now
            task = self.board.create_task(
                name=name[:250],
                markdown=markdown,
                due_date=None,
                assignees=(),
                idempotency_key=key,
                tags=(ALERT_TAG,),
            )
        except IntegrationError as error:
            ambiguous = isinstance(error, TransientError) and error.ambiguous
            self.ledger.fail(attempt, str(error), maybe_done=ambiguous)
            raise AlertNotSent(f"{key}: ClickUp failed: {error}") from error
        self.ledger.finish(attempt, "accepted", provider_ref=task.id)
        return task.id


@dataclass(frozen=True)
class Delivered:
    """How one alert went: by mail, as a ClickUp task, or left to the run sending it now."""

    key: str
    channel: Channel
    reason: str = ""


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
        self.mailer = Mailer(run, postgres, outlook, settings)
        self.ops = OpsBoard(run, postgres, board, settings) if board is not None else None

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
            return self._deliver(key)
        finally:
            lock.release()

    def _deliver(self, key: str) -> Delivered:
        mail, ids = self.render(key)
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
