"""The chaos of a simulation, from its seed: what goes wrong at the vendors in a given hour, which
runs are killed for real after a provider accepted their write, and when Postgres goes away.

Each fault is a sandbox fault (``sandbox/faults.py``) posted for one business hour and counted by
the sandbox as it hits; what was injected and what hit are tallied by kind for the summary.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from followup_pipeline.simulation.world import World

#: EspoCRM's queue job does not run this hour: its webhooks arrive an hour late, after later ones
#: of the senders and behind the next hour's changes.
HELD = "webhooks held back an hour"
#: The faults an hour can bring: (name in the summary, the sandbox's fault). Counts keep each
#: fault short: a vendor that fails a few requests, not one that is gone for the hour.
MENU: tuple[tuple[str, dict[str, Any]], ...] = (
    ("CRM answers 503", {"vendor": "espocrm", "kind": "error", "status": 503, "count": 3}),
    ("CRM answers 500", {"vendor": "espocrm", "kind": "error", "status": 500, "count": 2}),
    ("ClickUp answers 429", {"vendor": "clickup", "kind": "rate_limit", "count": 3}),
    ("ClickUp answers 5xx", {"vendor": "clickup", "kind": "error", "status": 502, "count": 2}),
    ("ClickUp answers slowly", {"vendor": "clickup", "kind": "latency", "latency_s": 1.0,
                                "count": 2}),
    ("ClickUp answers malformed", {"vendor": "clickup", "kind": "malformed", "count": 1}),
    ("ClickUp creates, then fails", {"vendor": "clickup", "kind": "apply_then_error",
                                     "method": "POST", "path": r"/list/[^/]+/task$",
                                     "count": 1}),
    ("ClickUp creates, answer lost", {"vendor": "clickup", "kind": "drop_answer",
                                      "method": "POST", "path": r"/list/[^/]+/task$",
                                      "count": 1}),
    ("Graph fails", {"vendor": "graph", "kind": "error", "status": 503, "count": 3}),
    ("Graph sends, then fails", {"vendor": "graph", "kind": "apply_then_error",
                                 "method": "POST", "path": "sendMail", "count": 1}),
    ("model answers nonsense", {"vendor": "mistral", "kind": "invalid_output", "count": 2}),
    ("model answers 500", {"vendor": "mistral", "kind": "error", "status": 500, "count": 1}),
    ("company lookup fails", {"vendor": "pdl", "kind": "error", "status": 500, "count": 1}),
    ("Moodle answers 503", {"vendor": "moodle", "kind": "error", "status": 503, "count": 2}),
    ("Accredible fails", {"vendor": "accredible", "kind": "error", "status": 500, "count": 1}),
    ("webhook dropped", {"vendor": "webhooks", "kind": "drop", "count": 1}),
    ("webhooks sent twice", {"vendor": "webhooks", "kind": "duplicate", "count": 1}),
    ("webhooks reordered", {"vendor": "webhooks", "kind": "reorder", "count": 1}),
    ("webhooks delayed", {"vendor": "webhooks", "kind": "latency", "latency_s": 0.5,
                          "count": 1}),
    # Not a sandbox fault: the runner holds EspoCRM's queue back for the hour (``HELD``).
    (HELD, {}),
)  # fmt: skip

#: The kills: a job run in a process of its own, and the write that, once accepted by the
#: provider, is its moment to die (the answer held back 60 s; the kill comes first).
KILLS: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("evaluate", "clickup", {"method": "POST", "path": r"/list/[^/]+/task$"}, "ClickUp task"),
    ("morning_report", "graph", {"method": "POST", "path": "sendMail"}, "Graph mail"),
    ("lms_reminders", "graph", {"method": "POST", "path": "sendMail"}, "Graph mail"),
    ("lead_intake", "espocrm", {"method": "POST", "path": r"/Lead$"}, "CRM Lead"),
)
#: On Fridays under chaos, the weekly overview is killed after its first mail was accepted.
WEEKLY_KILL = ("weekly_report", "graph", {"method": "POST", "path": "sendMail"}, "Graph mail")
#: How long a killed run's child may take to reach its write.
KILL_WAIT_S = 45.0


@dataclass(frozen=True)
class Kill:
    job: str
    vendor: str
    fault: dict[str, Any]
    what: str


class Chaos:
    """The faults of each hour, the kills and the outage, all from one ``rng``."""

    def __init__(self, world: World, rng: random.Random, *, enabled: bool, per_hour: float):
        self.world = world
        self.rng = rng
        self.enabled = enabled
        self.per_hour = per_hour
        #: Faults by name: injected (posted) and hit (answered so by the sandbox).
        self.injected: Counter[str] = Counter()
        self.hit: Counter[str] = Counter()
        self._posted: dict[str, tuple[str, int]] = {}
        #: Why a run meant to be killed ended on its own with an error.
        self.child_errors: list[str] = []

    def hour(self) -> list[str]:
        """Post this hour's faults (none without chaos); their names."""
        if not self.enabled:
            return []
        names: list[str] = []
        while self.rng.random() < self.per_hour and len(names) < 3:
            name, spec = self.rng.choice(MENU)
            self.injected[name] += 1
            names.append(name)
            if not spec:  # the runner's own (HELD)
                self.hit[name] += 1
                continue
            made = self.world.control("POST", "/faults", spec)
            self._posted[str(made["id"])] = (name, int(spec.get("count", 1)))
        return names

    def clear(self) -> None:
        """End the hour's faults, counting how often each hit."""
        if not self._posted:
            return
        listed = self.world.control("GET", "/faults")
        faults = listed["faults"] if isinstance(listed, dict) else listed
        active = {str(fault["id"]): int(fault.get("hits", 0)) for fault in faults}
        for fault_id, (name, count) in self._posted.items():
            # A fault that hit its count is over, and no longer listed.
            self.hit[name] += active.get(fault_id, count)
        self.world.control("DELETE", "/faults")
        self._posted.clear()

    def kill(self, kill: Kill, *, partition: str | None = None) -> bool:
        """Run ``kill.job`` in a child process and SIGKILL it once the provider accepted its
        write (and before the answer reached it). False when the run ended before it wrote."""
        world = self.world
        spec = {"vendor": kill.vendor, "kind": "latency", "latency_s": 60, "applied": True,
                **kill.fault}  # fmt: skip
        made = world.control("POST", "/faults", spec)
        before = _effects(world, kill.vendor)
        child = world.spawn(kill.job, partition=partition)
        landed = False
        deadline = time.monotonic() + KILL_WAIT_S
        try:
            while time.monotonic() < deadline and child.poll() is None:
                if _effects(world, kill.vendor) > before:
                    landed = True
                    break
                time.sleep(0.05)
            if landed:
                time.sleep(0.3)  # the provider holds the write; its answer waits 60 s
        finally:
            world.kill(child)
            world.control("DELETE", f"/faults/{made['id']}")
        name = f"run killed after {kill.what} accepted ({kill.job})"
        self.injected[name] += 1
        self.hit[name] += int(landed)
        if not landed and child.returncode not in (0, -9):
            # The run ended on its own, and not well: why, for the summary.
            tail = world.child_log.read_text(errors="replace").strip().splitlines()[-1:]
            self.child_errors.append(f"{kill.job} exited {child.returncode}: {' '.join(tail)}")
        return landed


def _effects(world: World, vendor: str) -> int:
    """How many of the killed write's kind the provider holds or took: tasks, mails, Lead
    creates. Read through the control API, which no fault touches (an injected CRM error must not
    stop the simulation's own look)."""
    if vendor == "clickup":
        return len(world.control("GET", "/clickup/tasks")["tasks"])
    if vendor == "graph":
        return len(world.control("GET", "/outbox")["messages"])
    # A create is counted as it arrives; the caller waits a moment for its commit.
    return int(world.control("GET", "/stats")["writes"].get("espocrm", {}).get("POST Lead", 0))
