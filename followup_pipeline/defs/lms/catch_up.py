"""The catch-up queue's door (docs/architecture.md §10): an open action of a tenant that can be
neither done nor suppressed — a reminder or a certificate that failed its every attempt, a
learner without an address, content due and not approved — is parked with the tenant's named
owner and backup (the operations owner and backup where the tenant names none), and closed,
with how, when it is done or settled. The alert checks mail each new item to the operations list
and its owner (``defs/alerts/checks.py``); ``followup lms queue`` lists them."""

from datetime import datetime

from followup_pipeline.engine.scope import Database
from followup_pipeline.settings import Settings
from followup_pipeline.store import lms_queue
from followup_pipeline.store.lms import Tenant
from followup_pipeline.store.lms_queue import Parked, QueueKind


class CatchUp:
    """The queue of one tenant in one run."""

    def __init__(self, db: Database, tenant: Tenant, settings: Settings, now: datetime) -> None:
        self.db = db
        self.tenant = tenant
        self.settings = settings
        self.now = now

    def park(self, key: str, kind: QueueKind, what: str, reason: str) -> bool:
        """Queue the action with its owner (once while open); whether it is new."""
        item = Parked(
            tenant_id=self.tenant.id,
            action_key=key,
            kind=kind,
            what=what,
            reason=reason,
            owner=self.tenant.owner or self.settings.ops_owner,
            backup=self.tenant.backup or self.settings.ops_backup,
        )
        with self.db.connection() as conn, conn.transaction():
            return lms_queue.park(conn, item, at=self.now)

    def close(self, key: str, how: str) -> bool:
        """Close the action's open item (if any), with how it ended."""
        with self.db.connection() as conn, conn.transaction():
            return lms_queue.close(conn, key, how, at=self.now)
