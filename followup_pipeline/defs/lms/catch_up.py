"""The learning reminders' door to the one list of work waiting for a person
(``engine/work.py``, docs/architecture.md §12): an open action of a tenant that can be neither
done nor suppressed — a reminder or a certificate that failed its every attempt, a learner
without an address, content due and not approved — waits with the tenant's named owner and
backup (the operations owner and backup where the tenant names none), and closes, with how,
when it is done or settled. The alert checks mail each new item to the operations list and its
owner (``defs/alerts/checks.py``); ``followup lms queue`` and ``followup work`` list them."""

from datetime import datetime

from followup_pipeline.domain.work import ItemKind
from followup_pipeline.engine import work
from followup_pipeline.engine.scope import Database
from followup_pipeline.settings import Settings
from followup_pipeline.store.lms import Tenant


class CatchUp:
    """One tenant's items of the list, in one run."""

    def __init__(self, db: Database, tenant: Tenant, settings: Settings, now: datetime) -> None:
        self.db = db
        self.tenant = tenant
        self.settings = settings
        self.now = now

    def park(self, key: str, kind: ItemKind, what: str, reason: str) -> bool:
        """The action waits with its owner (once while it waits); whether it is a new item."""
        with self.db.connection() as conn:
            return work.park(
                conn,
                action_key=key,
                kind=kind,
                tenant=self.tenant,
                what=what,
                reason=reason,
                settings=self.settings,
                at=self.now,
            )

    def close(self, key: str, how: str) -> bool:
        """Close the action's waiting item (if any), with how it ended."""
        with self.db.connection() as conn, conn.transaction():
            return work.settle_parked(conn, key, how, at=self.now)
