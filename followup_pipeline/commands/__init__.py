"""Sub-commands of ``followup``: each command's module here defines ``register(commands)``.

``register`` receives the sub-parser collection and adds its parsers, each with a ``handler``
default of type ``Handler``. ``cli.py`` discovers the modules, so a new command is a new file.
A module without ``register`` holds what commands share (the doctor's probes, the backup file).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator

from followup_pipeline.settings import Settings

Handler = Callable[[argparse.Namespace, Settings], int]


def add_by(parser: argparse.ArgumentParser, who: str = "who does it") -> None:
    """``--by NAME``: who does an operator action (default: the user running the command; never
    blank), kept in the audit."""
    from followup_pipeline.store.audit import actor, os_user

    parser.add_argument("--by", type=actor, default=os_user(), help=f"{who} (default: you)")


@contextlib.contextmanager
def in_environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment while Dagster resources are built or a job runs
    in it (they read the database URL and the secrets through ``dg.EnvVar``), and the
    environment as it was after."""
    before = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)
