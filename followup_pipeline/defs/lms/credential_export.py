"""A certificate's export to the credential platform (Accredible): the vendor part of its send (a
``Sender`` of ``engine/effects.py``, which owns the rest) and its mirror on the certificate's
record (``lms_certificates``).

The ledger key travels as the credential's own id (Accredible keeps it as ``license_id``) and in
its ``meta_data``. Accredible has no idempotency of its own, so an export whose answer was lost
is looked up by that id before a second create; a credential made is read back by its id. An
answer that breaks its schema may have been a create: it ends ``unknown``, like a lost one.
``CertificateBook`` keeps each outcome on the record and counts it: ``attempted`` as the request
leaves; ``issued`` with the credential's id; ``confirmed`` (its queue item closed); ``failed``
or ``unknown`` (``issue_failed``); ``suppressed`` with the reason.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.defs.lms.outbound import FOUND, failure
from followup_pipeline.defs.lms.ports import CredentialPlatform
from followup_pipeline.engine.effects import ActionSpec, Sent
from followup_pipeline.engine.late import settle_parked
from followup_pipeline.engine.scope import Database
from followup_pipeline.integrations.errors import PermanentError, SchemaError, TransientError
from followup_pipeline.store import lms_certificates as certs
from followup_pipeline.store.lms_certificates import CertificateRow

#: Why a certificate cannot be exported for a learner.
NO_ADDRESS = "the learner has no e-mail address in Moodle"


@dataclass(frozen=True)
class CertificateBook:
    """The records of one tenant's certificates in one run, and the run's counts of them."""

    db: Database
    now: datetime
    counts: Counter[str]

    def mark(self, row: CertificateRow, state: str) -> None:
        """Record where the export of ``row``'s generation stands, on its own."""
        with self.db.connection() as conn, conn.transaction():
            certs.set_state(conn, row, state, at=self.now)


class CredentialExport:
    """The export of one certificate's generation to the tenant's account."""

    searchable = True
    searches_first = False
    may_be_ambiguous = True
    #: How a look-up's find after a lost answer is recorded (the engine's ``confirmed``).
    found_note = FOUND

    def __init__(
        self, row: CertificateRow, platform: CredentialPlatform, book: CertificateBook
    ) -> None:
        self.row = row
        self.platform = platform
        self.book = book

    def look_up(self, spec: ActionSpec) -> str | None:
        """The credential made under the key (its own id), if the platform holds it."""
        found = self.platform.credential(spec.key)
        return found.id if found is not None else None

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Create the credential; its id."""
        row = self.row
        if not row.learner_email:
            raise PermanentError(NO_ADDRESS, vendor="accredible")
        self.book.mark(row, "attempted")
        touch()
        try:
            issued = self.platform.issue(
                group_id=row.group_id,
                name=row.learner_name or row.learner_email,
                email=row.learner_email,
                issued_on=row.completed_at.date(),
                key=spec.key,
            )
        except SchemaError as error:  # a 2xx whose body we could not read: it may be made
            raise TransientError(
                f"the answer to a create broke its schema ({error.field}: {error.problem})",
                vendor=error.vendor, ambiguous=True,
            ) from error  # fmt: skip
        return issued.id

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Whether the platform holds the credential made (None: no id to read)."""
        if provider_ref is None:
            return None
        return self.platform.credential(provider_ref) is not None

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """The outcome on the certificate's record."""
        row, now, counts = self.row, self.book.now, self.book.counts
        if sent.state == "suppressed":
            certs.set_state(conn, row, "suppressed", at=now, reason=sent.reason)
            counts[f"suppressed_{sent.reason}"] += 1
        elif sent.state == "confirmed":
            ref = sent.provider_ref
            certs.set_state(conn, row, "confirmed", at=now, credential_id=ref)
            settle_parked(conn, row.idempotency_key, f"confirmed: credential {ref}", at=now)
            counts["confirmed"] += 1
        else:  # sent, or found at the platform by its key
            certs.set_state(conn, row, "issued", at=now, credential_id=sent.provider_ref)
            counts["issued"] += sent.state == "sent"

    def failed(self, sent: Sent) -> None:
        """An export that failed: ``unknown`` when it may have been made, else ``failed``."""
        self.book.mark(self.row, failure(self, sent))
        self.book.counts["issue_failed"] += 1
