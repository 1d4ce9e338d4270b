"""How an alert reaches a person: one mail to the operations owner and backup through Graph,
sent once per ledger key (``Mailer``); when mail fails, or nobody is set to receive it, a task in
the operations list in ClickUp (``OpsBoard``), also once per key (``{key}:clickup``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Literal

from followup_pipeline.defs.common import Attempts, Connections
from followup_pipeline.defs.evaluate.ports import Log
from followup_pipeline.defs.report.mailer import Mailer, MailError
from followup_pipeline.domain.alerts import AlertMail, render_alert
from followup_pipeline.integrations.clickup import ClickUpClient
from followup_pipeline.integrations.errors import IntegrationError, TransientError
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.machine import ui_url
from followup_pipeline.resources import PostgresResource
from followup_pipeline.settings import Settings
from followup_pipeline.store import alerts as store
from followup_pipeline.store import ledger
from followup_pipeline.store.ledger import ActionSpec
from followup_pipeline.store.run_lock import RunLock

Channel = Literal["mail", "clickup", "in_flight"]
#: The tag every alert task carries in the operations list.
ALERT_TAG = "followup-alert"


class AlertNotSent(RuntimeError):
    """Neither channel took the alert; the next ``alert`` run tries again."""


def clickup_key(key: str) -> str:
    """The ledger key of an alert's ClickUp task."""
    return f"{key}:clickup"


class OpsBoard(Attempts):
    """Tasks in the operations list, created at most once per ledger key (its key travels as a
    tag and is searched before any create)."""

    def __init__(
        self,
        db: Connections,
        board: ClickUpClient,
        settings: Settings,
        *,
        now: datetime,
        run_id: str | None,
    ) -> None:
        self.db = db
        self.board = board
        self.settings = settings
        self.now = now
        self.run_id = run_id

    def post_once(self, key: str, *, name: str, markdown: str) -> str:
        """The task id of ``key``'s task, created unless it exists; ``AlertNotSent`` when
        ClickUp fails or an earlier create may still be on its way."""
        with self.db.connection() as conn:
            action = ledger.action_by_key(conn, key)
            age = ledger.age_s(conn, action.id) if action is not None else None
        if action is not None and action.outcome in ("accepted", "confirmed"):
            return action.provider_ref or ""
        maybe_sent = action is not None and action.outcome in ("attempted", "unknown")
        if maybe_sent and (age or 0.0) < self.settings.in_flight_s():
            raise AlertNotSent(f"{key}: the last create may still be on its way")
        spec = ActionSpec(key=key, kind="alert", due_at=self.now, time_zone=self.settings.timezone)
        attempt = self._begin(spec)
        if attempt is None:
            return ""  # another run created it meanwhile
        try:
            found = self.board.find_tasks_by_key(idempotency_key=key)
            if found:
                self._finish(attempt, "confirmed", provider_ref=found[0].id)
                return found[0].id
            with self.db.connection() as conn:
                ledger.touch(conn, attempt.action_id)  # the in-flight window starts now
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
            self._finish(attempt, "unknown" if ambiguous else "failed", error=str(error))
            raise AlertNotSent(f"{key}: ClickUp failed: {error}") from error
        self._finish(attempt, "accepted", provider_ref=task.id)
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
        postgres: PostgresResource,
        outlook: OutlookClient,
        board: ClickUpClient | None,
        settings: Settings,
        *,
        now: datetime,
        run_id: str | None,
        log: Log,
    ) -> None:
        self.postgres = postgres
        self.settings = settings
        self.now = now
        self.run_id = run_id
        self.log = log
        # Alerts go to the operators, not to the team: FOLLOWUP_DRY_RUN does not hold them.
        live = settings.model_copy(update={"dry_run": False})
        self.mailer = Mailer(postgres, outlook, live, now=now, run_id=run_id, log=log)
        self.ops = (
            OpsBoard(postgres, board, settings, now=now, run_id=run_id)
            if board is not None
            else None
        )

    def _ambiguous(self, key: str) -> bool:
        """Whether the mail of ``key`` may have gone (its action says ``unknown``)."""
        with self.postgres.connection() as conn:
            action = ledger.action_by_key(conn, key)
        return action is not None and action.outcome in ("attempted", "unknown")

    @staticmethod
    def _mailed(key: str, outcome: str) -> Delivered:
        if outcome == "in_flight":
            return Delivered(key, "in_flight", "its mail may still be on its way")
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
        )
        return mail, [row.id for row in rows]

    def deliver(self, key: str) -> Delivered:
        """Send the alert ``key`` by mail, else as a ClickUp task; ``AlertNotSent`` when neither
        took it. Two runs of one alert at once: the second leaves it to the first."""
        lock = RunLock.try_take(self.postgres.url, f"alert:{key}", owner=self.run_id or "alert")
        try:
            if not lock.held:
                return Delivered(key, "in_flight", f"another run is sending it ({lock.holder})")
            return self._deliver(key)
        finally:
            lock.release()

    def _deliver(self, key: str) -> Delivered:
        mail, ids = self.render(key)
        with self.postgres.connection() as conn:
            task = ledger.action_by_key(conn, clickup_key(key))
        if task is not None and task.outcome in ("accepted", "confirmed"):
            return Delivered(key, "clickup", "sent before")
        recipients = self.settings.ops_recipients()
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
        self.ops.post_once(clickup_key(key), name=mail.subject, markdown=mail.markdown + note)
        return Delivered(key, "clickup", reason)
