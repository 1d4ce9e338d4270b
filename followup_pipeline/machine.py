"""Where a machine lives, and the environment its Dagster processes need.

``followup dev`` starts the machine; ``followup dagster …`` and ``followup doctor`` work on the
same machine from another shell with nothing exported: the same ``DAGSTER_HOME``, the same
database URLs, the sandbox's settings (when the sandbox stands in for the vendors) and the
secrets read from ``.env`` or the secrets folder.
"""

from __future__ import annotations

import json
import os
import shlex
from importlib import resources
from pathlib import Path
from typing import Any

from followup_pipeline.settings import ConfigError, Settings, load_settings, secret_environment
from followup_pipeline.store.embedded import EmbeddedCluster

#: The code location's name: runs, schedules' states and backfills are stored under it, so
#: every process that loads the definitions must use the same one.
LOCATION = "followup"
MODULE = "followup_pipeline.definitions"


#: The files of the instance, installed into ``DAGSTER_HOME``: the root ``dagster.yaml`` and
#: ``workspace.yaml`` of the checkout are their source, and the package ships them byte for byte
#: (``followup_pipeline/instance/``; a test fails on any difference), so an installed package
#: needs no checkout.
INSTANCE_FILES = ("dagster.yaml", "workspace.yaml")


def dagster_home(settings: Settings) -> Path:
    """``FOLLOWUP_HOME/dagster``: the machine's ``DAGSTER_HOME``."""
    return settings.home / "dagster"


def install_dagster_home(settings: Settings) -> Path:
    """Create ``DAGSTER_HOME`` with the instance's ``dagster.yaml`` and ``workspace.yaml``;
    return it. The workspace names the code location ``followup`` (module ``MODULE``) and runs
    its code server from ``DAGSTER_HOME`` (``working_directory: {env: DAGSTER_HOME}``), never
    from the operator's folder, where a module would shadow a package."""
    home = dagster_home(settings)
    home.mkdir(parents=True, exist_ok=True)
    files = {
        name: (resources.files("followup_pipeline") / "instance" / name).read_bytes()
        for name in INSTANCE_FILES
    }
    if settings.code_server_host is not None:
        files["workspace.yaml"] = grpc_workspace(settings).encode()
    for name, content in files.items():
        # Written aside and moved in place: roles starting on one host at once never read
        # half a file.
        partial = home / f".{name}.{os.getpid()}"
        partial.write_bytes(content)
        os.replace(partial, home / name)
    return home


def grpc_workspace(settings: Settings) -> str:
    """The workspace of a production machine: the code location ``followup`` served by the code
    server at ``FOLLOWUP_CODE_SERVER_HOST``:``FOLLOWUP_CODE_SERVER_PORT`` (``followup serve
    code-server``), which the webserver and the daemon reach over gRPC instead of starting one."""
    location = {
        "host": settings.code_server_host,
        "port": settings.code_server_port,
        "location_name": LOCATION,
    }
    return (
        "# Written by followup from FOLLOWUP_CODE_SERVER_HOST and FOLLOWUP_CODE_SERVER_PORT.\n"
        + json.dumps({"load_from": [{"grpc_server": location}]}, indent=2)
        + "\n"
    )


def workspace_file(settings: Settings) -> Path:
    """The workspace file that names the code location ``followup``."""
    return dagster_home(settings) / "workspace.yaml"


def vendor_mode(settings: Settings) -> str:
    """'sandbox' when no vendor credential is set, 'real' when all are; else refuse."""
    missing = settings.sandbox_credentials_missing()
    if len(missing) == 4:
        return "sandbox"
    if missing:
        raise ConfigError(
            "some vendor credentials are set and others are not; set all or none "
            f"(none starts the sandbox). Missing: {', '.join(missing)}"
        )
    return "real"


def sandbox_env_file(settings: Settings) -> Path:
    """Where ``followup dev`` keeps the settings that point the machine at its sandbox."""
    return settings.home / "sandbox.env"


def read_env_file(path: Path) -> dict[str, str]:
    """The ``FOLLOWUP_*`` assignments of a shell-quoted env file."""
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        for word in shlex.split(line, comments=True):
            name, sep, value = word.partition("=")
            if sep and name.startswith("FOLLOWUP_"):
                values[name] = value
    return values


def with_sandbox(settings: Settings) -> Settings:
    """The settings as the running machine has them: with the sandbox's URLs and credentials
    when no vendor credential is configured and ``followup dev`` started a sandbox."""
    path = sandbox_env_file(settings)
    if vendor_mode(settings) != "sandbox" or not path.exists():
        return settings
    values = read_env_file(path)
    overrides: dict[str, Any] = {
        name.removeprefix("FOLLOWUP_").lower(): value for name, value in values.items()
    }
    return load_settings(**{"home": settings.home, **overrides})


def database_urls(settings: Settings) -> tuple[str, str]:
    """(the machine's database URL, Dagster's storage URL); the embedded cluster's unless
    ``FOLLOWUP_DATABASE_URL`` is set. The cluster must exist and run (``acquire`` it first)."""
    if settings.database_url is not None:
        if settings.dagster_pg_url is None:
            raise ConfigError(
                "FOLLOWUP_DAGSTER_PG_URL: with FOLLOWUP_DATABASE_URL set, give Dagster's "
                "storage its own postgresql+psycopg2:// URL"
            )
        return settings.database_url.get_secret_value(), settings.dagster_pg_url.get_secret_value()
    cluster = EmbeddedCluster(settings.home)
    return cluster.url("followup"), cluster.url("dagster", driver="postgresql+psycopg2")


def machine_environment(
    settings: Settings, base: dict[str, str], *, secrets: bool = True
) -> dict[str, str]:
    """``base`` plus what a process of this machine reads: ``DAGSTER_HOME``, the home, both
    database URLs, the sandbox's settings and, with ``secrets``, the secrets read from ``.env``
    or the secrets folder (which only Dagster's processes need, for ``dg.EnvVar``)."""
    database, storage = database_urls(settings)
    env = dict(base)
    path = sandbox_env_file(settings)
    if vendor_mode(settings) == "sandbox" and path.exists():
        env.update(read_env_file(path))
    if secrets:
        env.update(secret_environment(settings))
    env.update(
        DAGSTER_HOME=str(dagster_home(settings)),
        FOLLOWUP_HOME=str(settings.home),
        FOLLOWUP_DATABASE_URL=database,
        FOLLOWUP_DAGSTER_PG_URL=storage,
    )
    return env


#: ``dagster`` commands that load the code location from a workspace (``-w``), and those that
#: take only a Python module (``-m``; ``job execute`` runs in this process, no location needed).
#: Checked against Dagster 1.13's ``--help``; any other command is passed on unchanged.
WORKSPACE_COMMANDS = {
    ("job", "list"), ("job", "print"), ("job", "launch"), ("job", "backfill"),
    ("schedule", "list"), ("schedule", "start"), ("schedule", "stop"), ("schedule", "logs"),
    ("schedule", "preview"), ("schedule", "restart"),
    ("sensor", "list"), ("sensor", "start"), ("sensor", "stop"), ("sensor", "preview"),
    ("sensor", "cursor"), ("definitions", "validate"),
}  # fmt: skip
MODULE_COMMANDS = {
    ("job", "execute"), ("job", "scaffold_config"), ("asset", "materialize"), ("asset", "list"),
}  # fmt: skip
TARGET_OPTIONS = (
    "-w", "--workspace", "-m", "--module-name", "-f", "--python-file", "--package-name",
    "--grpc-port", "--grpc-socket", "--grpc-host", "--autoload-defs-module-name",
)  # fmt: skip


def dagster_argv(argv: list[str], home: Path) -> list[str]:
    """``argv`` for the ``dagster`` CLI, naming the machine's code location (``home``'s
    workspace, or its module run from ``home``) where a command loads one and none was named."""
    command = tuple(argv[:2])
    if any(a.split("=")[0] in TARGET_OPTIONS for a in argv) or "--help" in argv:
        return argv
    if command in WORKSPACE_COMMANDS:
        return [*argv, "-w", str(home / "workspace.yaml")]
    if command in MODULE_COMMANDS:
        return [*argv, "-m", MODULE, "-d", str(home)]
    return argv


def addresses_file(settings: Settings) -> Path:
    """Where ``followup dev`` notes the addresses it serves, for the commands of another shell."""
    return settings.home / "machine.json"


def write_addresses(settings: Settings, **urls: str) -> None:
    """Note the machine's addresses (``ui``, ``ingress``, ``sandbox``) for other shells."""
    addresses_file(settings).write_text(json.dumps(urls, indent=2) + "\n", encoding="utf-8")


def read_addresses(settings: Settings) -> dict[str, str]:
    """The addresses the last ``followup dev`` served on; empty if it never ran here."""
    try:
        found = json.loads(addresses_file(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def ui_url(settings: Settings) -> str:
    """Where operators reach the Dagster UI (the links in alerts): ``FOLLOWUP_UI_URL``, else the
    address the last ``followup dev`` served on, else Dagster's default."""
    if settings.ui_url is not None:
        return str(settings.ui_url).rstrip("/")
    return read_addresses(settings).get("ui", "http://127.0.0.1:3000").rstrip("/")


def links_url(settings: Settings) -> str:
    """Where a person reaches the ingress from a mail: ``FOLLOWUP_LINKS_URL``, else the address
    the last ``followup dev`` served the ingress on, else the ingress's own address."""
    if settings.links_url is not None:
        return str(settings.links_url).rstrip("/")
    own = f"http://{settings.ingress_host}:{settings.ingress_port}"
    return read_addresses(settings).get("ingress", own).rstrip("/")


class NoInstance(RuntimeError):
    """The machine's Dagster instance cannot be opened (never started, or unreadable)."""


def open_instance(settings: Settings) -> Any:
    """The machine's Dagster instance (a ``dg.DagsterInstance``; close it after use).

    Read from ``DAGSTER_HOME``'s ``dagster.yaml`` with the storage URL put in, so nothing need
    be exported. ``DagsterInstance.local_temp`` is the public call that takes overrides: given a
    folder, it opens that folder's persistent instance (only without one is it temporary).
    """
    import dagster as dg

    home = dagster_home(settings)
    if not (home / "dagster.yaml").exists():
        raise NoInstance(f"no instance at {home}: start the machine with `make run`")
    try:
        _, storage = database_urls(settings)
        overrides = {"storage": {"postgres": {"postgres_url": storage}}}
        return dg.DagsterInstance.local_temp(tempdir=str(home), overrides=overrides)
    except Exception as error:  # Dagster raises many kinds here
        raise NoInstance(
            f"instance at {home} unreadable: {type(error).__name__}: {error}"
        ) from error
