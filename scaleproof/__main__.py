"""``make scale-proof``: the production shape on this machine, scaled out over hosts made of
network namespaces, under a load of signed webhooks with an ingress replica and the code server
killed; exits 1 when a check fails. Needs root (namespaces, nginx from Debian's packages).

The orchestrator makes the hosts (``hosts.py``) and runs itself again on the operator's host
(``ops``), from where it starts every process on its own host and reads the outcome.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from followup_pipeline.first_runs import launch_run  # as `make run` queues its first runs
from followup_pipeline.store.db import connect
from scaleproof import checks, report
from scaleproof.hosts import HOSTS, network
from scaleproof.services import (
    INGRESS_PORT,
    SANDBOX_PORT,
    UI_PORT,
    Machine,
    Service,
    run_on,
    start_edge,
    start_postgres,
    wait_for,
)

#: The load: webhooks, and how many a second leave the senders.
WEBHOOKS = 3000
RATE = 60.0
#: When (seconds into the load) each kill and restart comes.
KILL_INGRESS_AT, RESTART_INGRESS_AT = 10.0, 22.0
KILL_CODE_SERVER_AT, RESTART_CODE_SERVER_AT = 16.0, 26.0
SETTLE_S = 600.0
#: Then a backlog on purpose: webhooks faster than one register run can take them while the CRM
#: answers slowly, so that the sensor launches a second run beside the first.
BURST, BURST_RATE, BURST_CRM_LATENCY_S = 600, 150.0, 0.3


def _outer(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        print("make scale-proof needs root: it makes network namespaces and runs nginx")
        return 2
    if shutil.which("nginx") is None:
        print("scale-proof needs nginx (Debian's package `nginx`); `make scale-proof` installs it")
        return 2
    # Root's own lock folder, never truncated, never through a link someone else left there.
    folder = Path("/run/lock") if Path("/run/lock").is_dir() else Path(tempfile.gettempdir())
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
    lock = os.open(folder / "followup-scale-proof.lock", flags, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        print("another scale proof is running on this machine (its hosts have the same names)")
        return 2
    try:
        return _hosts_and_inner(args)
    finally:
        os.close(lock)


def _hosts_and_inner(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="followup-scale-"))
    work.chmod(0o755)
    try:
        with network() as hosts:
            inner = [sys.executable, "-m", "scaleproof", "--inside", "--work", str(work)]
            child = subprocess.Popen(hosts["ops"].command(inner))
            try:
                return child.wait()
            finally:
                if child.poll() is None:  # stopped from outside: it stops its processes
                    child.terminate()
                    child.wait(120)
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _graphql_ready(machine: Machine) -> bool:
    query = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus"
    query += " locationOrLoadError { __typename } } } } }"
    answer = httpx.post(f"http://webserver:{UI_PORT}/graphql", json={"query": query}, timeout=5)
    entries = answer.json()["data"]["workspaceOrError"]["locationEntries"]
    return any(e["locationOrLoadError"]["__typename"] == "RepositoryLocation" for e in entries)


def _start(machine: Machine) -> dict[str, Service]:
    started: dict[str, Service] = {}
    started["postgres"] = start_postgres(machine)
    sandbox = machine.followup(
        "sandbox",
        "vendors",
        "sandbox",
        "--host",
        HOSTS["vendors"].address,
        "--port",
        str(SANDBOX_PORT),
        "--no-demo-data",
    )
    sandbox.start()
    started["sandbox"] = sandbox
    run_on(
        HOSTS["ops"],
        [str(Path(sys.executable).with_name("followup")), "migrate"],
        env=machine.env(HOSTS["ops"]),
    )
    wait_for("the sandbox", lambda: httpx.get(f"http://vendors:{SANDBOX_PORT}/_sandbox/deals"))
    for name in ("ingress-1", "ingress-2"):
        address = HOSTS[name].address
        started[name] = machine.followup(
            name,
            name,
            "serve",
            "ingress",
            "--host",
            address,
            "--port",
            str(INGRESS_PORT),
            "--workers",
            "1",
            secrets="ingress",
        )
    started["code-server"] = machine.followup(
        "code-server",
        "dagster",
        "serve",
        "code-server",
        "--host",
        HOSTS["dagster"].address,
        secrets="code-server",
    )
    started["daemon"] = machine.followup("daemon", "dagster", "serve", "daemon")
    started["webserver"] = machine.followup(
        "webserver", "webserver", "serve", "webserver", "--host", HOSTS["webserver"].address
    )
    for name in ("ingress-1", "ingress-2", "code-server", "daemon", "webserver"):
        started[name].start()
    started["nginx"] = start_edge(machine)
    for name in ("ingress-1", "ingress-2"):
        url = f"http://{name}:{INGRESS_PORT}/healthz"
        wait_for(name, lambda url=url: httpx.get(url).is_success)  # type: ignore[misc]
    wait_for("the webserver with the code location", lambda: _graphql_ready(machine), 240)
    return started


def _seed_deals(count: int) -> None:
    deals = [
        {"id": f"scale-{n:05d}", "name": f"Scale deal {n}", "stage": "Proposal"}
        for n in range(count)
    ]
    answer = httpx.post(
        f"http://vendors:{SANDBOX_PORT}/_sandbox/deals",
        json={"deals": deals, "emit_webhooks": False},
        timeout=120,
    )
    answer.raise_for_status()


def _client(machine: Machine, *argv: str) -> subprocess.Popen[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SCALEPROOF_HOOK_SECRET": machine.sandbox.webhooks[2].secret.get_secret_value(),
        "SCALEPROOF_UI_PASSWORD": machine.ui_password,
    }
    command = HOSTS["client"].command([sys.executable, "-m", "scaleproof.client", *argv])
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )


def _load(
    machine: Machine, started: dict[str, Service]
) -> tuple[dict[str, Any], list[tuple[float, str]]]:
    """Send the webhooks; kill and restart an ingress replica and the code server meanwhile."""
    ca = str(machine.work / "edge" / "etc" / "tls" / "edge.crt")
    hook = machine.sandbox.webhooks[2]  # Opportunity.fieldUpdate.stage
    sender = _client(
        machine,
        "send",
        "--url",
        "https://edge/webhooks/espocrm",
        "--ca",
        ca,
        "--deals",
        str(WEBHOOKS),
        "--rate",
        str(RATE),
        "--hook-id",
        hook.id,
    )
    start = time.monotonic()
    plan = [
        (KILL_INGRESS_AT, "SIGKILL ingress-1", started["ingress-1"].kill),
        (KILL_CODE_SERVER_AT, "SIGKILL the code server", started["code-server"].kill),
        (RESTART_INGRESS_AT, "ingress-1 started again", started["ingress-1"].start),
        (RESTART_CODE_SERVER_AT, "the code server started again", started["code-server"].start),
    ]
    timeline: list[tuple[float, str]] = []
    back = 0.0
    for at, what, action in sorted(plan, key=lambda step: step[0]):
        time.sleep(max(0.0, start + at - time.monotonic()))
        action()
        timeline.append((time.time(), what))
        if action == started["code-server"].start:
            back = time.time()
    out, _ = sender.communicate(timeout=WEBHOOKS / RATE + 300)
    timeline.append((time.time(), "the senders are done"))
    return {**json.loads(out), "code_server_back": back}, timeline


def _burst(machine: Machine) -> dict[str, Any]:
    """The backlog: ``BURST`` more webhooks (new deals) while the CRM takes
    ``BURST_CRM_LATENCY_S`` a request; the senders' output (their deliveries, when they
    started and ended) once every event is processed."""
    ca = str(machine.work / "edge" / "etc" / "tls" / "edge.crt")
    faults = f"http://vendors:{SANDBOX_PORT}/_sandbox/faults"
    slow = {"vendor": "espocrm", "kind": "latency", "latency_s": BURST_CRM_LATENCY_S}
    httpx.post(faults, json={**slow, "seconds": 300}, timeout=10).raise_for_status()
    sender = _client(
        machine, "send", "--url", "https://edge/webhooks/espocrm", "--ca", ca,
        "--deals", str(BURST), "--start", str(WEBHOOKS), "--rate", str(BURST_RATE),
        "--hook-id", machine.sandbox.webhooks[2].id,
    )  # fmt: skip
    out, _ = sender.communicate(timeout=BURST / BURST_RATE + 300)
    _settle(machine)
    httpx.delete(faults, timeout=10).raise_for_status()
    sent: dict[str, Any] = json.loads(out)
    return sent


def _settle(machine: Machine) -> float:
    """Wait until no event is pending; how long it took."""
    start = time.monotonic()
    with connect(machine.database_url, autocommit=True) as conn:
        pending = "SELECT count(*) AS pending FROM events WHERE status = 'pending'"
        wait_for(
            "every event processed",
            lambda: conn.execute(pending).fetchone() == {"pending": 0},
            SETTLE_S,
        )
    return time.monotonic() - start


def _register_places_free(machine: Machine, ca: str) -> None:
    """Wait until no ``register`` run is in flight, before the backlog. A run killed with the
    code server keeps one of register's two places (the sensor counts it in flight, and so does
    dagster.yaml's tag limit) until it is failed: by ``dead_runs`` once its presence is gone
    long enough, or, when its launch died with the code server before it started, by Dagster's
    run monitoring (``start_timeout_seconds``, 180 s). Until then the sensor launches one run
    at a time beside it, and a backlog would be taken by one run alone."""

    def none_in_flight() -> bool:
        found = checks.runs("https://edge:8443", ca, machine.ui_password, "register")
        return all(run["status"] in checks.FINISHED for run in found)

    wait_for("no register run in flight", none_in_flight, SETTLE_S)


def _evaluate_single(machine: Machine, ca: str) -> list[dict[str, Any]]:
    """Two evaluate runs through the UI's queue and, while the first works, one out of the queue
    on the daemon's host (`dagster job execute`); every evaluate run once they all ended. The
    CRM answers slowly meanwhile (1.5 s a request), so that the runs meet: a run takes half a
    minute. The queue holds the second back; the advisory lock must turn the third away.

    The machine's hourly ``evaluate`` may be among them (the proof meets the full hour): the
    outside run waits for the proof's own first run to work, and every evaluate run in flight
    is waited for, the scheduled one too, so that each is one more run that must not overlap."""
    sandbox = f"http://vendors:{SANDBOX_PORT}/_sandbox/faults"
    slow = {"vendor": "espocrm", "kind": "latency", "latency_s": 1.5, "seconds": 240}
    httpx.post(sandbox, json=slow, timeout=10).raise_for_status()
    ours = []
    for number in (1, 2):
        launched = launch_run(
            "https://edge:8443",
            "evaluate",
            {checks.PROOF_TAG: f"queued {number}"},
            auth=("operator", machine.ui_password),
            verify=ca,
        )
        if isinstance(launched, str):
            raise RuntimeError(f"evaluate could not be queued through the edge: {launched}")
        ours.append(str(launched["run"]["runId"]))

    def evaluate_runs() -> list[dict[str, Any]]:
        return checks.runs("https://edge:8443", ca, machine.ui_password, "evaluate")

    def mine(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The proof's queued runs and Dagster's retries of them (a run that failed)."""
        return [
            r for r in found if r["runId"] in ours or r["tags"].get("dagster/root_run_id") in ours
        ]

    def working() -> bool:
        return any(r["status"] == "STARTED" for r in mine(evaluate_runs()))

    wait_for("a queued evaluate run of the proof at work", working, 300)
    time.sleep(3)  # it takes the lock as its resources are set up
    outside = machine.followup(
        "evaluate-outside", "dagster", "dagster", "job", "execute", "-j", "evaluate",
        "--tags", json.dumps({checks.PROOF_TAG: "outside the queue"}), secrets="code-server",
    )  # fmt: skip
    outside.start()
    assert outside.process is not None
    outside.process.wait(600)

    def ended() -> bool:
        found = evaluate_runs()
        return len(mine(found)) >= len(ours) and all(r["status"] in checks.FINISHED for r in found)

    wait_for("every evaluate run", ended, 600)
    httpx.delete(sandbox, timeout=10).raise_for_status()
    return evaluate_runs()


def _inner(args: argparse.Namespace) -> int:
    machine = Machine(Path(args.work), HOSTS)
    machine.write_secrets()
    started: dict[str, Service] = {}
    ca = str(machine.work / "edge" / "etc" / "tls" / "edge.crt")
    try:
        began = time.monotonic()
        started = _start(machine)
        print(f"the machine is up on {len(HOSTS)} hosts in {time.monotonic() - began:.0f} s")
        _seed_deals(WEBHOOKS + BURST)
        result, timeline = _load(machine, started)
        settle_s = _settle(machine)
        timeline.append((time.time(), "every event processed"))
        _register_places_free(machine, ca)
        timeline.append((time.time(), "no register run in flight (the killed ones failed)"))
        burst = _burst(machine)
        timeline += [
            (float(burst["started"]), "the backlog's senders start"),
            (float(burst["ended"]), "the backlog's senders are done"),
            (time.time(), "every event processed"),
        ]
        result["burst"] = burst["deliveries"]
        result["burst_crm_latency_s"] = BURST_CRM_LATENCY_S
        with connect(machine.database_url) as conn:
            found = checks.events_check(conn, result["deliveries"] + result["burst"])
            stats = report.event_stats(conn)
            spans = checks.claim_spans(conn)
        register_runs = checks.runs("https://edge:8443", ca, machine.ui_password, "register")
        timeline.append((time.time(), "two evaluate runs queued, one out of the queue"))
        evaluate_runs = _evaluate_single(machine, ca)
        timeline.append((time.time(), "every evaluate run ended"))
        found.append(checks.single_check(evaluate_runs))
        prober = _client(
            machine,
            "probe",
            "--ca",
            ca,
            "--ingress",
            HOSTS["ingress-1"].address,
            HOSTS["ingress-2"].address,
        )
        probes = json.loads(prober.communicate(timeout=120)[0])
        with connect(machine.database_url) as conn:
            forms = conn.execute(
                "SELECT count(*) AS stored FROM events WHERE source = %s", ("site-form",)
            ).fetchone()
        found += report.edge_checks(probes, int(forms["stored"]) if forms else -1)
        found.append(report.register_check(spans))
        all_runs = checks.runs("https://edge:8443", ca, machine.ui_password, None)
        error_log = machine.work / "edge" / "error.log"
        moved = error_log.read_text(encoding="utf-8").count("connect() failed")
        print(
            report.render(
                result,
                timeline,
                settle_s,
                stats,
                found,
                register_runs,
                evaluate_runs,
                probes,
                moved,
                spans,
                all_runs,
            )
        )
        return 0 if all(check.holds for check in found) else 1
    finally:
        for service in reversed(list(started.values())):
            service.stop()


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(130)  # the hosts and processes are taken down on the way out


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(prog="python -m scaleproof", description=__doc__)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help="keep the logs and data folder")
    args = parser.parse_args(argv)
    return _inner(args) if args.inside else _outer(args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
