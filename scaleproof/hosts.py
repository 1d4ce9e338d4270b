"""Hosts for the scale proof: Linux network namespaces made by the proof itself, each with its own
address, joined by two bridges that carry no address of this machine.

- ``inside``: the machine's own network (Postgres, the ingress replicas, the Dagster roles, the
  vendors' sandbox, the operator's host, the edge's inside leg).
- ``outside``: the senders' network; only the edge (nginx) has a leg on both, and it forwards
  nothing (no IP forwarding in its namespace): from outside, the edge's ports are all there is.

``ip netns exec`` puts ``/etc/netns/NAME/hosts`` in place of ``/etc/hosts`` for what it runs, so
each host resolves the others by name as it would in DNS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: A prefix of every namespace and link this proof makes (and removes, leftovers included).
PREFIX = "fu"
INSIDE = "10.231.0"
OUTSIDE = "10.231.1"


@dataclass(frozen=True)
class Host:
    """A host: a network namespace with an address on the inside or outside network."""

    name: str
    address: str
    #: The edge's second address, on the outside network.
    outside_address: str | None = None

    @property
    def namespace(self) -> str:
        return f"{PREFIX}-{self.name}"

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this host."""
        return ["ip", "netns", "exec", self.namespace, *argv]


#: The hosts, as ARCHITECTURE's scale path and the issue name them.
HOSTS = {
    "db": Host("db", f"{INSIDE}.10"),
    "vendors": Host("vendors", f"{INSIDE}.11"),
    "ingress-1": Host("ingress-1", f"{INSIDE}.21"),
    "ingress-2": Host("ingress-2", f"{INSIDE}.22"),
    "dagster": Host("dagster", f"{INSIDE}.30"),
    "webserver": Host("webserver", f"{INSIDE}.31"),
    "ops": Host("ops", f"{INSIDE}.40"),
    "edge": Host("edge", f"{INSIDE}.2", outside_address=f"{OUTSIDE}.2"),
    "client": Host("client", f"{OUTSIDE}.50"),
}


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *argv], check=check, capture_output=True, text=True)


def teardown() -> None:
    """Remove every namespace and bridge of this proof, a killed earlier run's included."""
    listed = _ip("netns", "list", check=False).stdout.split()
    for name in listed:
        if name.startswith(f"{PREFIX}-"):
            # A process left in a namespace would keep it, and its links, alive.
            for pid in _ip("netns", "pids", name, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _ip("netns", "delete", name, check=False)
            with contextlib.suppress(FileNotFoundError):
                for entry in Path("/etc/netns", name).iterdir():
                    entry.unlink()
                Path("/etc/netns", name).rmdir()
    for bridge in (f"{PREFIX}-inside", f"{PREFIX}-outside"):
        _ip("link", "delete", bridge, check=False)
    for line in _ip("-o", "link", check=False).stdout.splitlines():
        link = line.split(": ")[1].split("@")[0] if ": " in line else ""
        if link.startswith((f"{PREFIX}i", f"{PREFIX}o")) and link[len(PREFIX) + 1 :].isdigit():
            _ip("link", "delete", link, check=False)


def _attach(host: Host, address: str, bridge: str, leg: str) -> None:
    """A veth pair: one end in the host's namespace with ``address``, the other on ``bridge``."""
    outer = f"{PREFIX}{leg}{host.address.rsplit('.', 1)[1]}"
    inner = f"eth{leg}"
    _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", host.namespace)
    _ip("link", "set", outer, "master", bridge, "up")
    _ip("-n", host.namespace, "addr", "add", f"{address}/24", "dev", inner)
    _ip("-n", host.namespace, "link", "set", inner, "up")


def _hosts_file(host: Host) -> str:
    """What ``host`` finds in /etc/hosts: every host by name on the network it shares."""
    lines = ["127.0.0.1 localhost"]
    for other in HOSTS.values():
        if host.name == "client":  # outside, only the edge is there
            if other.outside_address:
                lines.append(f"{other.outside_address} {other.name}")
        elif other.name != "client":
            lines.append(f"{other.address} {other.name}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def network() -> Iterator[dict[str, Host]]:
    """Make every host, its addresses and names; remove them all on the way out."""
    teardown()
    try:
        for bridge in (f"{PREFIX}-inside", f"{PREFIX}-outside"):
            _ip("link", "add", bridge, "type", "bridge")
            _ip("link", "set", bridge, "up")
        for host in HOSTS.values():
            _ip("netns", "add", host.namespace)
            _ip("-n", host.namespace, "link", "set", "lo", "up")
            folder = Path("/etc/netns", host.namespace)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text(_hosts_file(host), encoding="utf-8")
            if host.name == "client":
                _attach(host, host.address, f"{PREFIX}-outside", "o")
                continue
            _attach(host, host.address, f"{PREFIX}-inside", "i")
            if host.outside_address:
                _attach(host, host.outside_address, f"{PREFIX}-outside", "o")
        # The edge forwards nothing between its two legs: only its own listeners are reachable.
        # The senders route the inside network through it, so that this is what stops them.
        subprocess.run(
            HOSTS["edge"].command(["sysctl", "-q", "-w", "net.ipv4.ip_forward=0"]), check=True
        )
        edge = HOSTS["edge"].outside_address
        assert edge is not None
        _ip("-n", HOSTS["client"].namespace, "route", "add", f"{INSIDE}.0/24", "via", edge)
        yield HOSTS
    finally:
        teardown()
