"""What an academy's people read needs of its records: each learner's language and zone as their
Moodle profile gives them (``lms_learners``, read by the daily whole sync), and a reminder by its
key with whom and what it is for (an owner's mail names them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from followup_pipeline.store.db import fetch_one
from followup_pipeline.store.queries import query


@dataclass(frozen=True)
class LearnerDetails:
    """A learner's language (a Moodle code: ``de``, ``en_us``) and zone; None: not given."""

    learner_id: int
    lang: str | None
    time_zone: str | None


def save(
    conn: psycopg.Connection[Any], tenant_id: str, learners: Iterable[LearnerDetails], at: datetime
) -> int:
    """Keep the learners' details (a row is rewritten only when they changed); how many rows."""
    params = [
        {"tenant_id": tenant_id, "learner_id": one.learner_id, "lang": one.lang,
         "time_zone": one.time_zone, "at": at}
        for one in learners
    ]  # fmt: skip
    if not params:
        return 0
    with conn.cursor() as cursor:
        cursor.executemany(query("lms_learner_save"), params)
    return len(params)


@dataclass(frozen=True)
class ReminderOf:
    """A reminder by its key: whom and what for."""

    key: str
    learner_id: int
    action_type: str
    due_at: datetime
    learner_name: str | None
    quiz_name: str | None


def reminder_of_key(conn: psycopg.Connection[Any], key: str) -> ReminderOf | None:
    """The reminder of ``key``, or None."""
    return fetch_one(conn, ReminderOf, query("lms_reminder_of_key"), {"key": key})
