"""``evaluate`` at 1,000, 10,000 and 100,000 open watches: the wall time and the CRM requests of a
quiet hourly run and of an hourly run after 1 % of the deals changed. Every run is the full
reconciliation (every deal in a watched stage listed, keyset pages of 200) plus the activity
since the cursor.

The sandbox runs in its own process (``followup sandbox``) holding one deal per watch; watches and
their steps are seeded with SQL (no step is due). Each run is a whole ``evaluate`` job run
(``execute_in_process``: Dagster's fixed cost included), its clock set to a Wednesday morning;
the CRM requests are the sandbox's own count of the EspoCRM API calls it answered.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import dagster as dg
import httpx
import psycopg

from benchmarks.harness import (
    SANDBOX,
    database,
    evaluate_resources,
    free_port,
    sandbox_settings,
)
from followup_pipeline.defs import evaluate, register
from followup_pipeline.integrations.espocrm import PAGE_SIZE
from followup_pipeline.integrations.resources import EspoCrmResource
from followup_pipeline.resources import PostgresResource
from followup_pipeline.sandbox.webhooks import php_json
from followup_pipeline.settings import Settings
from followup_pipeline.store.cadences import cadence_offsets
from followup_pipeline.store.db import connect
from followup_pipeline.store.events import store_delivery

#: The sizes measured (``FOLLOWUP_BENCH_SIZES=1000,10000`` for a shorter run by hand).
SIZES = tuple(
    int(s) for s in os.environ.get("FOLLOWUP_BENCH_SIZES", "1000,10000,100000").split(",")
)
QUIET_REPEAT = 3
#: The runs' clock: a Wednesday, 10:00 in the team's zone (Europe/Berlin by default).
NOW = datetime.fromisoformat("2026-03-04T09:00:00+00:00")
SEED_CHUNK = 5_000
REGISTER_ITEMS = 10_000
#: EspoCRM sends a webhook's items in batches of this many.
REGISTER_BATCH = 50
#: Rows committed one by one for the baseline.
REGISTER_BASELINE = 2_000
SEED_BASELINE = """
INSERT INTO followup.bench_watches (subject_id, subject_name, stage, cadence_name, offsets,
    time_zone, base_on, registered_at, registered_by)
VALUES (%(id)s, 'Deal', 'Proposal', 'default', %(offsets)s, 'Europe/Berlin', %(base_on)s,
    %(registered_at)s, 'webhook')
"""

SEED_WATCHES = """
INSERT INTO followup.watches (subject_id, subject_name, stage, cadence_name, offsets, time_zone,
    base_on, registered_at, registered_by)
SELECT id, 'Deal ' || n, %(stage)s, %(cadence)s, %(offsets)s, %(zone)s, %(base_on)s,
       %(registered_at)s, 'reconcile'
FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS d(id, n)
"""
SEED_STEPS = """
INSERT INTO followup.watch_steps (watch_id, step_no, offset_days, due_on)
SELECT w.id, o.n, o.days, %(due_on)s::date + o.days
FROM followup.watches w, unnest(%(offsets)s::int[]) WITH ORDINALITY AS o(days, n)
"""


@contextlib.contextmanager
def sandbox_process() -> Iterator[str]:
    """``followup sandbox`` in its own process on a free port, with no demo data."""
    port = free_port()
    followup = os.path.join(os.path.dirname(sys.executable), "followup")
    argv = [followup, "sandbox", "--port", str(port), "--no-demo-data"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/_sandbox/stats", timeout=1).is_success:
                    break
            time.sleep(0.2)
        else:
            raise RuntimeError("the sandbox did not start")
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


class World:
    """One size: the sandbox's deals and the database's watches, and the runs against them."""

    def __init__(self, db_url: str, base: str, settings: Settings) -> None:
        self.db_url = db_url
        self.base = base
        self.settings = settings
        self.control = httpx.Client(base_url=f"{base}/_sandbox", timeout=120)
        job_defs = dg.Definitions.merge(
            evaluate.build_defs(settings),
            dg.Definitions(resources=evaluate_resources(db_url, base, NOW.isoformat())),
        )
        self.job = job_defs.resolve_job_def("evaluate")
        self.instance = dg.DagsterInstance.ephemeral()
        self.ids: list[str] = []

    def close(self) -> None:
        self.control.close()

    def clock(self, moment: datetime) -> None:
        self.control.post("/clock", json={"now": moment.isoformat()}).raise_for_status()

    def seed(self, size: int) -> None:
        """``size`` deals in a watched stage (created two hours before the runs), and their
        open watches, registered the day before, with steps due a month later."""
        self.control.post("/reset", json={"demo": False}).raise_for_status()
        self.clock(NOW - timedelta(hours=2))
        stage = self.settings.watched_stages[0]
        self.ids = []
        for start in range(0, size, SEED_CHUNK):
            deals = [
                {"name": f"Deal {n}", "stage": stage}
                for n in range(start, min(size, start + SEED_CHUNK))
            ]
            answer = self.control.post("/deals", json={"deals": deals, "emit_webhooks": False})
            answer.raise_for_status()
            self.ids += [deal["id"] for deal in answer.json()["deals"]]
        with connect(self.db_url) as conn:
            offsets = list(cadence_offsets(conn, self.settings.cadence_name))
            conn.execute(
                "TRUNCATE followup.watches, followup.watch_steps, followup.job_cursors CASCADE"
            )
            conn.execute(
                SEED_WATCHES,
                {
                    "ids": self.ids,
                    "stage": stage,
                    "cadence": self.settings.cadence_name,
                    "offsets": offsets,
                    "zone": self.settings.timezone,
                    "base_on": (NOW - timedelta(days=1)).date(),
                    "registered_at": NOW - timedelta(days=1),
                },
            )
            conn.execute(SEED_STEPS, {"offsets": offsets, "due_on": NOW.date() + timedelta(30)})
            conn.execute("ANALYZE followup.watches")
            conn.execute("ANALYZE followup.watch_steps")

    def cursor_an_hour_ago(self) -> None:
        """As if the last successful run was an hour before ``NOW`` (same business day)."""
        with psycopg.connect(self.db_url) as conn:
            conn.execute(
                "INSERT INTO followup.job_cursors (name, position) VALUES ('evaluate', %(at)s) "
                "ON CONFLICT (name) DO UPDATE SET position = excluded.position",
                {"at": NOW - timedelta(hours=1)},
            )

    def change(self, share: float) -> int:
        """Change ``share`` of the deals half an hour before ``NOW``: half move to the lost
        stage, half get an e-mail. Returns how many changed."""
        self.clock(NOW - timedelta(minutes=30))
        changed = self.ids[:: int(1 / share)]
        for n, deal_id in enumerate(changed):
            if n % 2:
                self.control.post(
                    f"/deals/{deal_id}/stage", json={"stage": self.settings.lost_stage}
                ).raise_for_status()
            else:
                email = {"name": "Re: offer"}  # sent now, by the sandbox's clock
                self.control.post(f"/deals/{deal_id}/emails", json=email).raise_for_status()
        return len(changed)

    def requests(self) -> int:
        counts = self.control.get("/stats").json()["requests"].get("espocrm", {})
        return int(sum(counts.values()))

    def run(self) -> tuple[float, int, dict[str, Any]]:
        """One ``evaluate`` run: seconds, CRM requests, and the run's counts."""
        self.cursor_an_hour_ago()
        before = self.requests()
        config = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
        start = time.perf_counter()
        result = self.job.execute_in_process(instance=self.instance, run_config=config)
        seconds = time.perf_counter() - start
        assert result.success
        counts: dict[str, Any] = result.output_for_node("sync").counts
        return seconds, self.requests() - before, counts


def commit_per_row(db_url: str) -> float:
    """Rows a second, one INSERT + COMMIT each, into a copy of ``watches`` (then dropped)."""
    with connect(db_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE followup.bench_watches (LIKE followup.watches INCLUDING DEFAULTS "
            "INCLUDING IDENTITY INCLUDING INDEXES INCLUDING CONSTRAINTS)"
        )
        start = time.perf_counter()
        for n in range(REGISTER_BASELINE):
            conn.execute(
                SEED_BASELINE,
                {
                    "id": f"baseline-{n}",
                    "registered_at": NOW,
                    "offsets": [5, 12, 21],
                    "base_on": NOW.date(),
                },
            )
        rate = REGISTER_BASELINE / (time.perf_counter() - start)
        conn.execute("DROP TABLE followup.bench_watches")
    return rate


def register_rate(db_url: str, base: str, settings: Settings) -> list[str]:
    """``register`` over ``REGISTER_ITEMS`` stage-change items that name no deal (so each needs
    the CRM), in EspoCRM's batches of 50 a delivery: items/s of one whole run, CRM requests.
    Baseline, in the same run on the same Postgres: one INSERT + COMMIT a row into a copy of
    ``watches`` (the most a transaction per item could ever reach)."""
    world = World(db_url, base, settings)
    try:
        world.seed(REGISTER_ITEMS)
        with connect(db_url) as conn:
            conn.execute("TRUNCATE followup.watches, followup.watch_steps CASCADE")
            stage = settings.watched_stages[-1]
            for first in range(0, len(world.ids), REGISTER_BATCH):
                batch = world.ids[first : first + REGISTER_BATCH]
                items = [{"id": deal_id, "stage": stage} for deal_id in batch]
                store_delivery(
                    conn,
                    source="espocrm",
                    event_type="Opportunity.fieldUpdate.stage",
                    body=php_json(items),
                    headers={},
                )
        commits = commit_per_row(db_url)
        job_defs = dg.Definitions.merge(
            register.build_defs(settings),
            dg.Definitions(
                resources={
                    "postgres": PostgresResource(url=db_url),
                    "espocrm": EspoCrmResource(
                        base_url=f"{base}/espocrm",
                        api_key=SANDBOX.espocrm_api_key.get_secret_value(),
                    ),
                }
            ),
        )
        job = job_defs.resolve_job_def("register")
        before = world.requests()
        start = time.perf_counter()
        result = job.execute_in_process(
            instance=dg.DagsterInstance.ephemeral(),
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )
        seconds = time.perf_counter() - start
        requests = world.requests() - before
        counts = result.output_for_node("register_events")
        with connect(db_url) as conn:
            row = conn.execute("SELECT count(*) AS n FROM followup.watches").fetchone()
        opened = int(row["n"]) if row else 0
    finally:
        world.close()
    assert counts.get("registered") == REGISTER_ITEMS == opened, (counts, opened)
    rate = REGISTER_ITEMS / seconds
    return [
        "| items | deliveries | seconds (one run) | items/s | CRM requests"
        " | INSERT+COMMIT a row/s | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {REGISTER_ITEMS:,} | {REGISTER_ITEMS // REGISTER_BATCH} | {seconds:.2f} | {rate:,.0f} "
        f"| {requests} | {commits:,.0f} | {rate / commits:.2f} |",
        "",
    ]


def run() -> list[str]:
    """The lines of the section of docs/benchmarks.md."""
    rows: dict[int, dict[str, tuple[float, int]]] = {}
    extra: dict[int, int] = {}
    with database() as db_url, sandbox_process() as base:
        settings = sandbox_settings(base)
        world = World(db_url, base, settings)
        try:
            for size in SIZES:
                world.seed(size)
                quiet = sorted(world.run() for _ in range(QUIET_REPEAT))
                seconds, requests, counts = quiet[len(quiet) // 2]
                assert counts.get("crm_deals_watched_stages") == size, counts
                rows[size] = {"quiet": (seconds, requests)}
                extra[size] = world.change(0.01)
                seconds, requests, counts = world.run()
                rows[size]["changed"] = (seconds, requests)
                print(size, rows[size], flush=True)
        finally:
            world.close()
    lines = [
        "| open watches | hourly run, nothing changed | requests | listing pages "
        "| 1 % changed | requests |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for size, r in rows.items():
        pages = -(-size // PAGE_SIZE)
        lines.append(
            f"| {size:,} | {r['quiet'][0]:.2f} s | {r['quiet'][1]:,} | {pages:,} "
            f"| {r['changed'][0]:.2f} s ({extra[size]:,} deals) | {r['changed'][1]:,} |"
        )
    lines.append("")
    if len(SIZES) > 1:
        big, mid = rows[SIZES[-1]]["quiet"][0], rows[SIZES[-2]]["quiet"][0]
        ratio = big / mid
        lines += [f"Hourly run at {SIZES[-1]:,} against {SIZES[-2]:,} watches: {ratio:.2f}×.", ""]
    return lines


def register_run() -> list[str]:
    """The lines of the register section, on a database and a sandbox of its own."""
    with database() as url, sandbox_process() as base:
        return register_rate(url, base, sandbox_settings(base))


if __name__ == "__main__":
    print("\n".join(register_run() if "register" in sys.argv[1:] else run()))
