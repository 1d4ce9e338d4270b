"""Shared fixtures: a real Postgres, one migrated template database, a fresh copy per test."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from followup_pipeline.sandbox import SandboxConfig, env_lines
from followup_pipeline.store.db import connection_kwargs
from followup_pipeline.store.embedded import EmbeddedCluster
from followup_pipeline.store.migrate import migrate
from followup_pipeline_tests.support import served

#: Variables a developer sets on purpose to run the tests on another Postgres; the rest of
#: ``FOLLOWUP_*`` never reaches a test.
KEPT_VARIABLES = ("FOLLOWUP_DATABASE_URL", "FOLLOWUP_DAGSTER_PG_URL")


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's ``FOLLOWUP_*`` variables or ``./.env``: they are cleared,
    the working folder is the test's own, and ``FOLLOWUP_HOME`` is a temporary folder."""
    for name in list(os.environ):
        if name.startswith("FOLLOWUP_") and name not in KEPT_VARIABLES:
            monkeypatch.delenv(name)
    home = tmp_path / "followup-home"
    home.mkdir()
    monkeypatch.setenv("FOLLOWUP_HOME", str(home))
    monkeypatch.chdir(tmp_path)


def with_database(url: str, name: str, *, driver: str = "postgresql") -> str:
    """``url`` pointing at database ``name``, as a URL with the given SQLAlchemy-style driver."""
    params = conninfo_to_dict(url)
    user = quote(str(params.get("user", "postgres")), safe="")
    password = params.get("password")
    auth = f"{user}:{quote(str(password), safe='')}" if password else user
    host = params.get("host", "127.0.0.1")
    port = params.get("port", 5432)
    return f"{driver}://{auth}@{host}:{port}/{quote(name, safe='')}"


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """A superuser URL: FOLLOWUP_DATABASE_URL if set, else an embedded cluster for the session."""
    configured = os.environ.get("FOLLOWUP_DATABASE_URL")
    if configured:
        yield configured
        return
    # A folder of its own, not under pytest's numbered temp folders: pytest removes the oldest
    # of those when another session starts, which would pull the data from under a running
    # cluster of a concurrent session.
    home = Path(tempfile.mkdtemp(prefix="followup-test-home-"))
    cluster = EmbeddedCluster(home)
    cluster.acquire()
    with _admin(cluster.url("postgres")) as conn:
        # A throwaway cluster: durability buys nothing here, and it makes DROP DATABASE slow.
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield cluster.url("postgres")
    finally:
        cluster.release()
        # Every test's database is in it (gigabytes): gone with the folder, faster than a DROP
        # DATABASE each. Removing some 10 GB takes half a minute: a process of its own does it,
        # and the session ends meanwhile.
        doomed = home.with_name(home.name + "-removing")
        home.rename(doomed)
        subprocess.run(  # the shell leaves rm running in the background and returns at once
            ["sh", "-c", 'rm -rf -- "$1" > /dev/null 2>&1 &', "sh", str(doomed)],
            start_new_session=True,
            check=False,
        )


def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


@pytest.fixture(scope="session")
def database_factory(pg_admin_url: str) -> Iterator[Callable[..., str]]:
    """Creates databases (empty, or copies of a template); on a server of FOLLOWUP_DATABASE_URL,
    drops them after the session."""
    created: list[str] = []

    def create(template: str | None = None) -> str:
        name = f"fu_test_{uuid.uuid4().hex[:12]}"
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        with _admin(pg_admin_url) as conn:
            conn.execute(query)
        created.append(name)
        return with_database(pg_admin_url, name)

    yield create
    if not os.environ.get("FOLLOWUP_DATABASE_URL"):
        return  # the session's embedded cluster is removed with its folder (pg_admin_url)
    with _admin(pg_admin_url) as conn:
        for name in created:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="session")
def template_name(database_factory: Callable[..., str]) -> str:
    """A database migrated once per session, copied for every test."""
    url = database_factory()
    migrate(url)
    name = conninfo_to_dict(url)["dbname"]
    assert isinstance(name, str)
    return name


@pytest.fixture
def db_url(database_factory: Callable[..., str], template_name: str) -> str:
    """A fresh, migrated database for one test."""
    return database_factory(template_name)


@pytest.fixture
def db(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test's database, dict rows, schema ``followup``."""
    with psycopg.connect(db_url, autocommit=True, **connection_kwargs()) as conn:
        yield conn


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The project's root folder."""
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def sandbox_server() -> Iterator[str]:
    """The sandbox app served by uvicorn on a free loopback port, in a background thread."""
    from followup_pipeline.sandbox.app import create_app
    from followup_pipeline.sandbox.config import SandboxConfig

    with served(create_app(SandboxConfig()), log_level="warning") as base:
        yield base


@pytest.fixture
def sandbox(sandbox_server: str) -> str:
    """The sandbox's base URL, reset and without faults for each test."""
    with httpx.Client(base_url=sandbox_server, timeout=5) as control:
        control.post("/_sandbox/reset", json={}).raise_for_status()
        control.delete("/_sandbox/faults").raise_for_status()
    return sandbox_server


@pytest.fixture
def scheduler(
    tmp_path: Path,
    db_url: str,
    database_factory: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Any]:
    """Dagster's scheduler on the machine's instance and schedules, storage in a fresh Postgres
    database (``scheduling.py``: ``test_missed_ticks.py``, the restart drills)."""
    from .scheduling import machine_scheduler

    with machine_scheduler(tmp_path, db_url, database_factory(), monkeypatch) as built:
        yield built


@pytest.fixture
def on_sandbox(sandbox: str, db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The machine's settings as the demo has them: the sandbox's environment, nothing else
    (reports in English), on the test's database."""
    monkeypatch.setenv("FOLLOWUP_DATABASE_URL", db_url)
    for line in env_lines(SandboxConfig(), sandbox):
        name, _, value = line.partition("=")
        monkeypatch.setenv(name, shlex.split(value)[0])
    monkeypatch.setenv("FOLLOWUP_REPORT_LANGUAGE", "en")
    return sandbox
