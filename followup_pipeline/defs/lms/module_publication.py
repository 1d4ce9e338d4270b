"""A content version's publication in Moodle: the vendor part of its send (a ``Sender`` of
``engine/effects.py``, which owns the rest) and its mirror on the version's record
(``lms_content``).

Publishing shows the version's course module (``core_courseformat_update_course``, ``cm_show``).
Moodle showing the module visible (``core_course_get_course_module``) is both the look-up of a
publication whose answer was lost (never a blind second request) and its read-back.
``ContentBook`` keeps each outcome on the record and counts it: ``attempted`` as the request
leaves; ``published``; ``confirmed`` (its queue item closed); ``failed`` or ``unknown`` with the
error (``publish_failed``); ``superseded`` with the version that replaced it (its item closed);
approved and held by a dry run, with why (``held_`` and the tenant's mode).
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.defs.lms.outbound import failure
from followup_pipeline.defs.lms.ports import CourseSite
from followup_pipeline.engine.effects import ActionSpec, Sent, error_text
from followup_pipeline.engine.late import settle_parked
from followup_pipeline.engine.scope import Database
from followup_pipeline.store import lms_content
from followup_pipeline.store.lms import Tenant
from followup_pipeline.store.lms_content import ContentRow

#: The note of a publication found visible after its answer was lost.
VISIBLE = "visible"


@dataclass(frozen=True)
class ContentBook:
    """The records of one tenant's content in one run, and the run's counts of them."""

    db: Database
    tenant: Tenant
    now: datetime
    counts: Counter[str]

    def mark(self, row: ContentRow, state: str, *, reason: str | None = None) -> None:
        """Record where the version stands (and why), on its own."""
        with self.db.connection() as conn, conn.transaction():
            lms_content.set_state(conn, row, state, at=self.now, reason=reason)

    def held(self) -> str:
        """Why an approved version is not published in a dry run."""
        if self.tenant.mode != "live":
            return f"approved; not published: the tenant runs {self.tenant.mode}"
        return "approved; not published: the machine runs dry (FOLLOWUP_DRY_RUN)"


class ModulePublication:
    """The publication of one version: its course module shown."""

    searchable = True
    searches_first = False
    may_be_ambiguous = True
    #: How a look-up's find after a lost answer is recorded (the engine's ``confirmed``).
    found_note = VISIBLE

    def __init__(self, row: ContentRow, site: CourseSite, book: ContentBook) -> None:
        self.row = row
        self.site = site
        self.book = book

    def look_up(self, spec: ActionSpec) -> str | None:
        """The module, when Moodle shows it visible."""
        return str(self.row.cmid) if self.site.module_visible(self.row.cmid) else None

    def perform(self, spec: ActionSpec, touch: Callable[[], None]) -> str | None:
        """Show the module; its id."""
        self.book.mark(self.row, "attempted")
        touch()
        self.site.show_module(self.row.cmid, self.row.course_id)
        return str(self.row.cmid)

    def read_back(self, spec: ActionSpec, provider_ref: str | None) -> bool | None:
        """Whether Moodle shows the module visible now."""
        return self.site.module_visible(self.row.cmid)

    def mirror(self, conn: psycopg.Connection[Any], spec: ActionSpec, sent: Sent) -> None:
        """The outcome on the version's record."""
        row, now, counts = self.row, self.book.now, self.book.counts
        if sent.state == "suppressed" and sent.reason == "superseded":
            why = f"superseded by version {row.current_version}: never published"
            lms_content.set_state(conn, row, "superseded", at=now, reason=why)
            settle_parked(
                conn, row.idempotency_key, "superseded: a later version replaced it", at=now
            )
            counts["superseded"] += 1
        elif sent.state == "suppressed":  # a dry run: it waits, approved
            lms_content.set_state(conn, row, row.state, at=now, reason=self.book.held())
            counts[f"held_{self.book.tenant.mode}"] += 1
        elif sent.state == "confirmed":
            lms_content.set_state(conn, row, "confirmed", at=now)
            settle_parked(conn, row.idempotency_key, "published and read back", at=now)
            counts["confirmed"] += 1
        else:  # published, or found visible after a lost answer
            lms_content.set_state(conn, row, "published", at=now)
            counts["published"] += sent.state == "sent"

    def failed(self, sent: Sent) -> None:
        """A publication that failed: ``unknown`` when it may have been made, else ``failed``,
        with the error."""
        why = error_text(sent.error) if sent.error is not None else None
        self.book.mark(self.row, failure(self, sent), reason=why)
        self.book.counts["publish_failed"] += 1
