"""The scale proof's figures and its table, in Markdown (``docs/scale.md`` holds a run's)."""

from __future__ import annotations

import statistics
from typing import Any

import psycopg

from scaleproof.checks import PROOF_TAG, SCHEDULE_TAG, Check, most_at_once, origin, when

#: What the edge must answer from outside, by probe (``client.probe``).
EXPECTED = {
    "ui without a password": "401",
    "ui with a wrong password": "401",
    "ui with the password": "200",
    "/healthz from outside": "404",
    "/metrics from outside": "404",
    "a body over 1 MiB": "413",
    "plain HTTP on port 80": "ConnectionRefusedError",
    "plain HTTP on the TLS port": "HTTP/1.1 400 Bad Request",
}


def edge_checks(probes: dict[str, Any], forms_stored: int) -> list[Check]:
    """The edge's answers from the senders' network against what they must be."""
    found = []
    for name, expected in EXPECTED.items():
        check = Check(f"edge: {name} → {expected}", 1)
        if probes.get(name) != expected:
            check.broken.append(f"answered {probes.get(name)}")
        found.append(check)
    burst = probes.get("120 unsigned forms at once", {})
    limited = Check("edge: a burst over a source's rate → 429, none stored", 120)
    if not burst.get("429") or burst.get("200"):
        limited.broken.append(f"answers {burst}")
    if forms_stored:
        limited.broken.append(f"{forms_stored} unsigned forms stored")
    found.append(limited)
    for name in ("ingress-1", "ingress-2"):
        check = Check(f"edge: {name} unreachable from outside", 1)
        if str(probes.get(f"{name} directly", "")).startswith("HTTP"):
            check.broken.append(f"answered {probes.get(f'{name} directly')}")
        found.append(check)
    return found


def register_check(spans: list[dict[str, Any]]) -> Check:
    """Two ``register`` runs shared the event log at one time (``SKIP LOCKED`` claims): the
    spans in which their workers processed events overlap (``checks.claim_spans``, from the
    event log), not the runs' start and end: a run waits in the run queue and loads its code
    before it claims, and a run failed by ``dead_runs`` ends when it is failed, not when it
    died."""
    check = Check("register runs claiming at once (SKIP LOCKED claims), at least 2", len(spans))
    if most_at_once(spans) < 2:
        check.broken.append(f"at most {most_at_once(spans)} at once")
    return check


def event_stats(conn: psycopg.Connection[Any]) -> dict[str, int]:
    row = conn.execute(
        "SELECT count(*) AS events, coalesce(sum(duplicate_count), 0) AS duplicates,"
        " count(*) FILTER (WHERE attempts > 1) AS retried,"
        " count(DISTINCT claimed_by) AS claimers FROM events WHERE source = %s",
        ("espocrm",),
    ).fetchone()
    watches = conn.execute(
        "SELECT count(*) FILTER (WHERE registered_by = 'webhook') AS by_webhook,"
        " count(*) FILTER (WHERE registered_by = 'reconcile') AS by_reconcile FROM watches"
    ).fetchone()
    assert row is not None
    assert watches is not None
    return {name: int(value) for name, value in {**row, **watches}.items()}


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1] if len(values) > 1 else 0.0


def timeline_lines(timeline: list[tuple[float, str]], began: float) -> list[str]:
    """What happened when: seconds from the first webhook, and the clock (UTC)."""
    return [f"{at - began:6.1f} s  {when(at)}  {what}" for at, what in sorted(timeline)]


def scheduled(all_runs: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """The runs the machine's schedules launched (the proof's machine is new: during the
    proof), for the timeline."""
    found = []
    for run in all_runs:
        if SCHEDULE_TAG not in run["tags"]:
            continue
        outcome = run["tags"].get("followup/outcome", run["status"].lower())
        span = f"{when(run['startTime'])}–{when(run['endTime'])}" if run["endTime"] else "-"
        line = f"{run['jobName']} from its schedule, {outcome} ({span})"
        found.append((float(run["startTime"] or run["creationTime"]), line))
    return found


def render(
    result: dict[str, Any],
    timeline: list[tuple[float, str]],
    settle_s: float,
    stats: dict[str, int],
    found: list[Check],
    register_runs: list[dict[str, Any]],
    evaluate_runs: list[dict[str, Any]],
    probes: dict[str, Any],
    moved: int,
    spans: list[dict[str, Any]],
    all_runs: list[dict[str, Any]],
) -> str:
    deliveries = result["deliveries"]
    # A retry inherits its run's tags: the run that was failed is the one that failed.
    reaped = [
        r
        for r in register_runs
        if r["tags"].get("followup/failed_by") == "dead_runs" and r["status"] == "FAILURE"
    ]
    acked = [d for d in deliveries if d.get("acked")]
    first_try = [d for d in acked if d["statuses"][:1] == ["200"]]
    retried = [d for d in acked if d["statuses"][:1] != ["200"]]
    seconds = [float(d["s"]) for d in acked]
    span = float(result["ended"]) - float(result["started"])
    outcomes = [
        f"{r['tags'].get('followup/outcome', r['status'].lower())}"
        f" {when(r['startTime'] or 0)}–{when(r['endTime'] or 0)} ({origin(r)})"
        for r in sorted(evaluate_runs, key=lambda run: run["startTime"] or 0)
    ]
    succeeded = [r for r in register_runs if r["status"] == "SUCCESS"]
    # The run queue's places: every run but the one the proof starts outside the queue.
    queued = [r for r in all_runs if r["tags"].get(PROOF_TAG) != "outside the queue"]
    last = max(float(r["endTime"] or r["startTime"] or 0) for r in all_runs)
    lines = [
        "## The run",
        "",
        "| | |",
        "|---|---|",
        f"| webhooks sent | {len(deliveries):,} in {span:.0f} s ({len(deliveries) / span:.0f}/s) |",
        f"| acknowledged | {len(acked):,} ({len(first_try):,} at the first try,"
        f" {len(retried):,} after a refused or failed try) |",
        f"| tried on the other replica by the edge (a refused connection) | {moved:,} |",
        f"| then a backlog: webhooks sent / acknowledged, the CRM answering in"
        f" {result['burst_crm_latency_s']:g} s | {len(result['burst']):,} /"
        f" {sum(1 for d in result['burst'] if d.get('acked')):,} |",
        f"| redelivered after their 200 | {sum(1 for d in deliveries if d.get('redelivered')):,} |",
        f"| time to the 200, median / 95th percentile | {statistics.median(seconds) * 1000:.0f} ms"
        f" / {_quantile(seconds, 0.95) * 1000:.0f} ms |",
        f"| events stored / duplicates answered 200 | {stats['events']:,} /"
        f" {stats['duplicates']:,} |",
        f"| events claimed more than once (a run killed with its claim) | {stats['retried']:,} |",
        f"| acknowledged deals watched by their webhook / by `evaluate`'s reconciliation |"
        f" {stats['by_webhook']:,} / {stats['by_reconcile']:,} |",
        f"| register runs / failed by `dead_runs` / failed otherwise / runs that claimed events"
        f" last | {len(register_runs)} / {len(reaped)} /"
        f" {sum(1 for r in register_runs if r['status'] == 'FAILURE') - len(reaped)} /"
        f" {stats['claimers']} |",
        f"| register runs at once, most: claiming events (the event log) / running, of those"
        f" that ended well | {most_at_once(spans)} / {most_at_once(succeeded)} |",
        f"| runs of every job at once in the run queue's places, most (its limit: 5) |"
        f" {most_at_once(queued, until=last)} |",
        "| runs failed by `dead_runs`, seconds after the code server was back | "
        + (
            ", ".join(
                f"{float(r['endTime']) - float(result['code_server_back']):.0f}" for r in reaped
            )
            or "none"
        )
        + " |",
        f"| from the last 200 to every event processed | {settle_s:.0f} s |",
        f"| evaluate runs (outcome, UTC, launched by) | {', '.join(outcomes)} |",
        "",
        "## What happened when",
        "",
        "```",
        *timeline_lines(timeline + scheduled(all_runs), float(result["started"])),
        "```",
        "",
        "## The checks",
        "",
        "| check | checked | holds |",
        "|---|---|---|",
    ]
    for check in found:
        verdict = "yes" if check.holds else "NO: " + "; ".join(check.broken[:5])
        lines.append(f"| {check.name} | {check.checked:,} | {verdict} |")
    lines += ["", "The edge's answers: " + ", ".join(f"{k}: {v}" for k, v in probes.items())]
    return "\n".join([*lines, "", *runs_lines(all_runs, spans)])


def runs_lines(all_runs: list[dict[str, Any]], spans: list[dict[str, Any]]) -> list[str]:
    """Every run of the proof's machine (queued, started, ended, UTC) and the spans of work of
    ``register``'s workers in the event log: what the figures above are read from."""
    lines = ["## The runs", "", "```"]
    for run in sorted(all_runs, key=lambda r: float(r["creationTime"])):
        outcome = run["tags"].get("followup/outcome", run["status"].lower())
        started = when(run["startTime"]) if run["startTime"] else "-"
        ended = when(run["endTime"]) if run["endTime"] else "(not ended)"
        lines.append(
            f"{when(run['creationTime'])} {started}–{ended}  {run['jobName']:<14}"
            f" {outcome:<8} {origin(run)}"
        )
    lines += ["```", "", "register's workers, first and last event done (UTC), events:", "```"]
    for span in sorted(spans, key=lambda s: float(s["startTime"])):
        lines.append(f"{when(span['startTime'])}–{when(span['endTime'])}  {span['events']:>4}")
    return [*lines, "```"]
