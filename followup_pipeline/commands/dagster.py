"""``followup dagster …``: any Dagster CLI command on this machine's instance.

``dagster job backfill``, ``job execute`` or ``run list`` need ``DAGSTER_HOME``, both database URLs
and every setting the definitions read (the sandbox's, when it stands in for the vendors). This
command sets them as ``followup dev`` does and names the machine's code location where a command
loads it, so an operator's second shell needs nothing exported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from followup_pipeline.machine import (
    dagster_argv,
    dagster_home,
    install_dagster_home,
    machine_environment,
    sandbox_env_file,
    vendor_mode,
    with_sandbox,
)
from followup_pipeline.settings import ConfigError, Settings
from followup_pipeline.store.db import resolve_database_url


def run_dagster(argv: list[str], settings: Settings) -> int:
    """Run ``dagster ARGV`` with the machine's environment; its exit status."""
    dagster = str(Path(sys.executable).with_name("dagster"))
    if not argv or argv[-1] in ("--help", "-h"):
        return subprocess.run([dagster, *argv], check=False).returncode  # no machine needed
    resolve_database_url(settings)  # refuses a machine that does not exist; starts a stopped one
    if settings.code_server_host is None:  # else the code server has the vendors, not this host
        check_vendors(settings)
    install_dagster_home(with_sandbox(settings))
    # The settings as given: on the sandbox, the machine's environment takes the sandbox's own
    # settings file (its URLs, credentials and report recipients), as `followup dev` does.
    env = machine_environment(settings, dict(os.environ))
    return supervise([dagster, *dagster_argv(argv, dagster_home(settings))], env)


def check_vendors(settings: Settings) -> None:
    """Refuse a machine on the sandbox that ``make run`` never set up: its Dagster processes
    would have neither the vendors' credentials nor the sandbox's."""
    if vendor_mode(settings) == "sandbox" and not sandbox_env_file(settings).exists():
        raise ConfigError(
            f"no vendor credentials are set and there are no sandbox settings at "
            f"{sandbox_env_file(settings)}: start the machine once with `make run`, or set the "
            "vendor credentials (README, 'Pointing it at real systems')"
        )


def supervise(argv: list[str], env: dict[str, str]) -> int:
    """Run ``argv`` as a child and wait for it; its exit status.

    Ctrl-C reaches the child from the terminal; this process waits for it to finish its own
    stop instead of killing it (subprocess.run would, a quarter of a second later). SIGTERM (a
    supervisor's stop) is passed on, and the child waited for, as for Ctrl-C: an embedded
    cluster this process holds is released only after Dagster let go of it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = subprocess.Popen(argv, env=env)
    before = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    try:
        return child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, before)


def register(commands: Any) -> None:
    """Add ``dagster`` (for ``--help``; ``cli.main`` hands its arguments to Dagster unparsed)."""
    commands.add_parser(
        "dagster",
        help="run a Dagster CLI command on this machine's instance, e.g. "
        "`followup dagster job backfill -j evaluate --partitions …`",
    )
