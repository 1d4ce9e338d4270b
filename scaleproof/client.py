"""What the proof does from the senders' network (the ``client`` host), run there by the
orchestrator as ``python -m scaleproof.client send|probe …``; prints JSON.

``send``: signed EspoCRM webhooks at a steady rate through the edge, over TLS, each delivered as
EspoCRM delivers: again after any answer but 200 (a refusal, a 502, a lost connection), until it
is acknowledged or a minute passed. Every tenth is delivered a second time after its 200, as a
redelivery. ``probe``: what the edge lets through and what it refuses.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from followup_pipeline.sandbox.webhooks import php_json, signatures

#: How long a sender keeps delivering one webhook (EspoCRM's retries go on for longer).
GIVE_UP_S = 60.0


def _deliver(client: httpx.Client, url: str, body: bytes, hook: tuple[str, str]) -> dict[str, Any]:
    current, legacy = signatures(hook[0], body, hook[1])
    headers = {"Content-Type": "application/json", "Signature": current, "X-Signature": legacy}
    statuses: list[str] = []
    start = time.monotonic()
    while time.monotonic() - start < GIVE_UP_S:
        try:
            answer = client.post(url, content=body, headers=headers)
            statuses.append(str(answer.status_code))
            if answer.status_code == 200:
                return {"acked": True, "statuses": statuses, "s": time.monotonic() - start}
        except httpx.HTTPError as error:
            statuses.append(type(error).__name__)
        time.sleep(1.0)
    return {"acked": False, "statuses": statuses, "s": time.monotonic() - start}


def send(args: argparse.Namespace) -> dict[str, Any]:
    hook = (args.hook_id, os.environ["SCALEPROOF_HOOK_SECRET"])
    results: list[dict[str, Any]] = [{} for _ in range(args.deals)]
    local = threading.local()

    def client() -> httpx.Client:
        if not hasattr(local, "client"):
            local.client = httpx.Client(
                verify=ssl.create_default_context(cafile=args.ca), timeout=30
            )
        return local.client  # type: ignore[no-any-return]

    def one(index: int) -> None:
        deal = f"{args.prefix}{args.start + index:05d}"
        body = php_json([{"id": deal, "stage": "Proposal"}])
        result = _deliver(client(), args.url, body, hook)
        result.update(deal=deal, sha=hashlib.sha256(body).hexdigest())
        if result["acked"] and index % 10 == 0:  # a redelivery of the same webhook
            again = _deliver(client(), args.url, body, hook)
            result["redelivered"] = again["acked"]
            result["statuses"] += again["statuses"]
        results[index] = result

    started = time.time()
    with ThreadPoolExecutor(max_workers=args.threads) as pool:
        for index in range(args.deals):
            # A steady rate: the index-th webhook leaves at its own instant.
            delay = started + index / args.rate - time.time()
            if delay > 0:
                time.sleep(delay)
            pool.submit(one, index)
    return {"started": started, "ended": time.time(), "deliveries": results}


def _status(call: Any) -> str:
    try:
        return str(call().status_code)
    except (httpx.HTTPError, OSError) as error:
        return type(error).__name__


def _raw(host: str, port: int, request: bytes) -> str:
    """The first line of the answer to ``request`` over plain TCP, or why there was none."""
    try:
        with socket.create_connection((host, port), timeout=3) as conn:
            conn.sendall(request)
            return conn.recv(200).split(b"\r\n", 1)[0].decode(errors="replace") or "closed"
    except OSError as error:
        return type(error).__name__


def probe(args: argparse.Namespace) -> dict[str, Any]:
    tls = ssl.create_default_context(cafile=args.ca)
    auth = ("operator", os.environ["SCALEPROOF_UI_PASSWORD"])
    out: dict[str, Any] = {}
    with httpx.Client(verify=tls, timeout=10) as client:
        out["ui without a password"] = _status(lambda: client.get("https://edge:8443/"))
        out["ui with a wrong password"] = _status(
            lambda: client.get("https://edge:8443/", auth=("operator", "wrong"))
        )
        out["ui with the password"] = _status(lambda: client.get("https://edge:8443/", auth=auth))
        out["/healthz from outside"] = _status(lambda: client.get("https://edge/healthz"))
        out["/metrics from outside"] = _status(lambda: client.get("https://edge/metrics"))
        big = b"[" + b" " * (1024 * 1024 + 10) + b"]"
        out["a body over 1 MiB"] = _status(
            lambda: client.post("https://edge/webhooks/espocrm", content=big)
        )
        burst = [
            _status(lambda: client.post("https://edge/webhooks/site-form", content=b"{}"))
            for _ in range(120)
        ]
        out["120 unsigned forms at once"] = {s: burst.count(s) for s in sorted(set(burst))}
    request = b"POST /webhooks/espocrm HTTP/1.1\r\nHost: edge\r\nContent-Length: 2\r\n\r\n[]"
    out["plain HTTP on port 80"] = _raw("edge", 80, request)
    out["plain HTTP on the TLS port"] = _raw("edge", 443, request)
    for name, address in (("ingress-1", args.ingress[0]), ("ingress-2", args.ingress[1])):
        out[f"{name} directly"] = _raw(address, 8787, b"GET /healthz HTTP/1.1\r\n\r\n")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scaleproof.client")
    sub = parser.add_subparsers(dest="what", required=True)
    sender = sub.add_parser("send")
    sender.add_argument("--url", required=True)
    sender.add_argument("--ca", required=True)
    sender.add_argument("--deals", type=int, required=True)
    sender.add_argument("--rate", type=float, required=True)
    sender.add_argument("--threads", type=int, default=32)
    sender.add_argument("--hook-id", required=True)
    sender.add_argument("--prefix", default="scale-")
    sender.add_argument("--start", type=int, default=0, help="the first deal's number")
    prober = sub.add_parser("probe")
    prober.add_argument("--ca", required=True)
    prober.add_argument("--ingress", nargs=2, required=True)
    args = parser.parse_args(argv)
    result = send(args) if args.what == "send" else probe(args)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
