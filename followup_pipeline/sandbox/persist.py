"""The sandbox's world kept in a file, so that a second ``make run`` finds the CRM's deals, the
ClickUp tasks and the mail as the machine last saw them (the machine's watches are in Postgres;
a sandbox that forgot would disagree with them).

Saved every few seconds while something changed, and at shutdown; written to a temporary file
and renamed, so a crash leaves the last whole snapshot. Faults, rate windows and counters are not
kept: a restart clears them, as it clears a real vendor's incident.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from followup_pipeline.sandbox import records
from followup_pipeline.sandbox.state import SandboxState

#: Bump when the layout changes; a file of another version is set aside, not misread.
VERSION = 1


def snapshot(state: SandboxState) -> dict[str, Any]:
    """What a restart should find: the records, the outbox, the webhooks still queued, the
    forms and payments sent (their retries go on; a redelivery by id still finds them), and the
    Moodle sites' worlds (messages sent included)."""
    return {
        "version": VERSION,
        "deals": state.deals,
        "activities": state.activities,
        "leads": state.leads,
        "tasks": state.tasks,
        "comments": state.comments,
        "outbox": state.outbox,
        "drafts": state.drafts,
        "mailboxes": state.mailboxes,
        "queue": [
            {"webhook_id": item.webhook_id, "data": item.data, "attempts": item.attempts}
            for item in state.webhooks.queue
        ],
        "senders": [message.describe() for message in state.senders.messages.values()],
        "moodle": state.moodle,
        "credentials": state.credentials,
    }


class StateInUse(RuntimeError):
    """Another sandbox keeps its world in the same file."""


def claim(path: Path) -> int:
    """Hold the state file's lock for this process's life (its descriptor); ``StateInUse`` when
    another sandbox holds it: two writers would overwrite each other's world."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateInUse(f"{path} is in use by another sandbox") from None
    return fd


def save(state: SandboxState, path: Path) -> None:
    """Write the snapshot atomically (a temporary file of its own, then rename), readable by its
    owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(snapshot(state), ensure_ascii=False, separators=(",", ":"))
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as output:
            output.write(text)
            output.flush()
            os.fsync(output.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def load(state: SandboxState, path: Path) -> bool:
    """Restore a snapshot into ``state``; False when there is none. A file that cannot be read
    is renamed ``*.unreadable`` (kept for a look) and the sandbox starts afresh."""
    if not path.exists():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"not a sandbox snapshot of version {VERSION}")
        state.deals.update(data["deals"])
        state.activities.update(data["activities"])
        state.leads.update(data["leads"])
        state.tasks.update(data["tasks"])
        state.comments.update(data["comments"])
        state.outbox.extend(data["outbox"])
        state.drafts.update(data["drafts"])
        # Mailboxes are kept since they can be added; a file from before keeps the configured.
        for address in data.get("mailboxes", []):
            if address.lower() not in (known.lower() for known in state.mailboxes):
                state.mailboxes.append(address)
        records.backfill(state)
        for item in data["queue"]:
            state.webhooks.restore(item["webhook_id"], item["data"], int(item["attempts"]))
        for item in data.get("senders", []):  # a file from before has none
            state.senders.restore(item)
        state.moodle.update(data.get("moodle", {}))  # the Moodle sites' worlds
        state.credentials.update(data.get("credentials", {}))  # Accredible's
        # A seeded source would give the ids of the first run again (a new task would replace
        # an old one): after a restart, ids come from the system's randomness.
        state.rng.seed()
    except (OSError, ValueError, KeyError, TypeError) as error:
        state.reset()
        path.rename(path.with_name(path.name + ".unreadable"))
        print(f"sandbox: {path} could not be read ({error}); starting afresh", flush=True)
        return False
    return True
