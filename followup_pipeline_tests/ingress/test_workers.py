"""``followup ingress`` as production runs it: several workers on the machine's embedded
Postgres, one /metrics for all of them, a stop (SIGTERM or SIGINT) under load that answers
nothing it has not stored and leaves no Postgres of its own running, and a killed worker and a
Postgres restart under load that lose nothing answered (group commit)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from followup_pipeline.store.embedded import SYSTEM_USER, EmbeddedCluster, bin_path
from followup_pipeline_tests.support import free_port, wait_until

from .conftest import STAGE_HOOK, espocrm_delivery

pytestmark = pytest.mark.slow
FOLLOWUP = str(Path(sys.executable).with_name("followup"))


def _machine(tmp_path: Path) -> tuple[dict[str, str], EmbeddedCluster, str]:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}
    port = free_port()
    env.update(
        FOLLOWUP_HOME=str(home),
        FOLLOWUP_INGRESS_PORT=str(port),
        FOLLOWUP_ESPOCRM_WEBHOOKS=json.dumps(
            [{"id": STAGE_HOOK[0], "event": STAGE_HOOK[1], "secret": STAGE_HOOK[2]}]
        ),
    )
    migrated = subprocess.run(
        [FOLLOWUP, "migrate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert migrated.returncode == 0, migrated.stderr
    return env, EmbeddedCluster(home.resolve()), f"http://127.0.0.1:{port}"


def _start(env: dict[str, str], base: str, log: Path, workers: int = 2) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [FOLLOWUP, "ingress", "--workers", str(workers)],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wait_until(lambda: httpx.get(f"{base}/healthz", timeout=2).is_success, 60, "the ingress")
    return process


def _received(metrics: str) -> float:
    found = re.search(r'followup_ingress_received_total\{source="espocrm"\} ([0-9.]+)', metrics)
    return float(found.group(1)) if found else 0.0


def test_workers_share_one_metrics_and_stop_cleanly(tmp_path: Path) -> None:
    env, cluster, base = _machine(tmp_path)
    process = _start(env, base, tmp_path / "ingress.log")
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            for n in range(20):
                body, headers = espocrm_delivery([{"id": f"deal-{n}", "stage": "Proposal"}])
                assert client.post("/webhooks/espocrm", content=body, headers=headers).is_success
            # Whichever worker answers the scrape, it counts all twenty (new connections).
            for _ in range(6):
                with httpx.Client(base_url=base, timeout=10) as scraper:
                    assert _received(scraper.get("/metrics").text) == 20
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        left_running = cluster.is_running()
        if left_running:
            cluster.stop()
    assert not left_running


@pytest.mark.parametrize(
    ("signum", "workers"), [(signal.SIGTERM, 2), (signal.SIGINT, 2), (signal.SIGTERM, 1)]
)
def test_workers_a_stop_under_load_answers_only_what_it_stored(
    tmp_path: Path, signum: signal.Signals, workers: int
) -> None:
    env, cluster, base = _machine(tmp_path)
    log = tmp_path / "ingress.log"
    process = _start(env, base, log, workers)
    acknowledged: list[int] = []
    refused: list[int] = []
    stop = threading.Event()

    def send(worker: int) -> None:
        with httpx.Client(base_url=base, timeout=15) as client:
            n = 0
            while not stop.is_set():
                n += 1
                items = [{"id": f"w{worker}-{n}", "stage": "Proposal"}]
                body, headers = espocrm_delivery(items)
                try:
                    answer = client.post("/webhooks/espocrm", content=body, headers=headers)
                except httpx.HTTPError:
                    if process.poll() is not None:
                        return  # the ingress is gone: nothing more to send to
                    continue
                if answer.status_code == 200:
                    acknowledged.append(int(answer.json()["event"].split(":")[1]))
                else:
                    refused.append(answer.status_code)

    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(send, worker) for worker in range(16)]
        time.sleep(2.0)
        before = len(acknowledged)
        # As systemd, Docker or Kubernetes stop it: the signal to the command's process.
        os.kill(process.pid, signum)
        process.wait(timeout=60)
        stop.set()
        for future in futures:
            future.result()
    # No Postgres of this FOLLOWUP_HOME is left running: the command released what it started.
    left_running = cluster.is_running()
    if left_running:
        cluster.stop()  # not to leave it to the rest of the session
    assert not left_running, log.read_text()
    assert before > 10, log.read_text()
    cluster.acquire()
    try:
        with psycopg.connect(cluster.url("followup")) as conn:
            rows = conn.execute("SELECT id FROM followup.events").fetchall()
    finally:
        cluster.release()
    stored = {row[0] for row in rows}
    assert set(acknowledged) <= stored  # every 200 has its row
    assert len(set(acknowledged)) == len(acknowledged)  # and no two answers share one
    assert set(refused) <= {503}, refused  # a request cut by the stop is refused, not a 500


def _workers(pid: int) -> list[int]:
    """The ingress's worker processes: the children of ``pid`` that multiprocessing spawned
    as workers (not its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent == pid and b"spawn_main" in command and b"resource_tracker" not in command:
                found.append(int(entry.name))
    return found


def _break_under_load(pid: int, cluster: EmbeddedCluster, tmp_path: Path, log: Path) -> None:
    """Under load: a worker killed (SIGKILL), then Postgres restarted, then the load a while."""
    time.sleep(1.5)
    [victim, *_] = _workers(pid) or [0]
    assert victim, log.read_text()
    os.kill(victim, signal.SIGKILL)
    time.sleep(1.5)
    # (As the cluster's own user, as EmbeddedCluster runs its tools; its output to a file: the
    # server it starts would hold a pipe open for good.)
    user = SYSTEM_USER if os.geteuid() == 0 else None
    with (tmp_path / "pg_ctl.log").open("wb") as output:
        restarted = subprocess.run(
            [str(bin_path() / "pg_ctl"), "-D", str(cluster.data_dir), "-m", "fast", "-w",
             "-l", str(cluster.log_file), "restart"],
            stdout=output, stderr=subprocess.STDOUT, timeout=120, user=user,
        )  # fmt: skip
    assert restarted.returncode == 0, (tmp_path / "pg_ctl.log").read_text()
    time.sleep(2.0)


def test_workers_a_killed_worker_and_a_postgres_restart_lose_nothing_answered(
    tmp_path: Path,
) -> None:
    """Group commit under load, as it goes wrong: a worker killed (SIGKILL) with batches in
    flight, then Postgres restarted. Senders retry each delivery until it is answered 200, as
    EspoCRM does: every delivery answered 200 has its row, none is answered new twice, none is
    stored twice."""
    env, cluster, base = _machine(tmp_path)
    log = tmp_path / "ingress.log"
    process = _start(env, base, log, workers=2)
    answered: dict[str, list[tuple[int, bool]]] = {}
    guard = threading.Lock()
    stop = threading.Event()

    def send(worker: int) -> None:
        with httpx.Client(base_url=base, timeout=15) as client:
            n = 0
            while not stop.is_set():
                n += 1
                key = f"w{worker}-{n}"
                body, headers = espocrm_delivery([{"id": key, "stage": "Proposal"}])
                while not stop.is_set():  # until answered 200, as the sender retries
                    try:
                        answer = client.post("/webhooks/espocrm", content=body, headers=headers)
                    except httpx.HTTPError:
                        time.sleep(0.05)
                        continue
                    if answer.status_code == 200:
                        event = int(answer.json()["event"].split(":")[1])
                        with guard:
                            answered.setdefault(key, []).append((event, answer.json()["duplicate"]))
                        break
                    time.sleep(0.05)

    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(send, worker) for worker in range(8)]
            try:
                _break_under_load(process.pid, cluster, tmp_path, log)
            finally:
                stop.set()
            for future in futures:
                future.result()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        if cluster.is_running():
            cluster.stop()
    cluster.acquire()
    try:
        with psycopg.connect(cluster.url("followup")) as conn:
            rows = conn.execute("SELECT id, dedup_key FROM followup.events").fetchall()
    finally:
        cluster.release()
    stored = {row[0] for row in rows}
    assert len(answered) > 20, log.read_text()
    events = [event for answers in answered.values() for event, _ in answers]
    assert set(events) <= stored  # every 200 has its row
    assert len(events) == len(set(events))  # no row answered for two deliveries
    dedup = [row[1] for row in rows]
    assert len(dedup) == len(set(dedup))  # no delivery stored twice
