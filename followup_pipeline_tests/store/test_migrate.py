"""Migrations: ordered, recorded, idempotent, safe to run twice at once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from followup_pipeline.domain.money import THREE_DECIMAL, TWO_DECIMAL, ZERO_DECIMAL
from followup_pipeline.store.events import delivery_key
from followup_pipeline.store.migrate import available_migrations, current_version, migrate
from followup_pipeline_tests.store.dump_schema import REGENERATE, SCHEMA_FILE, normalised_dump


def _seeded(url: str) -> list[tuple[Any, ...]]:
    """The rows migrations seed: the cadences, by name."""
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT name, offsets FROM followup.cadences ORDER BY name").fetchall()


def test_migrate_fresh_matches_checked_in_schema(database_factory: Callable[..., str]) -> None:
    url = database_factory()
    migrate(url)
    expected = SCHEMA_FILE.read_text(encoding="utf-8")
    assert normalised_dump(url) == expected, (
        f"the migrated schema differs from {SCHEMA_FILE.name}: if the change is intended, "
        f"regenerate it with `{REGENERATE}` and review the diff"
    )
    assert _seeded(url) == [("default", [5, 12, 21])]
    with psycopg.connect(url) as conn:
        recorded = conn.execute(
            "SELECT version, name FROM followup.schema_migrations ORDER BY version"
        ).fetchall()
    assert recorded == [(m.version, m.name) for m in available_migrations()]


def test_migrate_fresh_and_stepwise_end_in_same_schema(
    database_factory: Callable[..., str],
) -> None:
    fresh, stepwise = database_factory(), database_factory()
    migrate(fresh)
    for migration in available_migrations():
        migrate(stepwise, target=migration.version)
        assert current_version(stepwise) == migration.version
    dump = normalised_dump(fresh)
    assert dump == normalised_dump(stepwise)
    assert "CREATE TABLE followup.watches" in dump
    assert _seeded(fresh) == _seeded(stepwise) == [("default", [5, 12, 21])]


def test_migrate_second_run_is_a_noop(database_factory: Callable[..., str]) -> None:
    url = database_factory()
    first = migrate(url)
    assert [m.version for m in first] == [m.version for m in available_migrations()]
    assert migrate(url) == []
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT count(*) FROM followup.schema_migrations").fetchone()
    assert rows == (len(available_migrations()),)


def test_migrate_two_commands_at_once_end_with_one_schema(
    database_factory: Callable[..., str],
) -> None:
    url = database_factory()
    env = {**os.environ, "FOLLOWUP_DATABASE_URL": url}
    command = [sys.executable, "-m", "followup_pipeline.cli", "migrate"]
    runs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    applied = [out.decode().count("applied ") for out, _ in outputs]
    assert sorted(applied) == [0, len(available_migrations())]
    assert current_version(url) == available_migrations()[-1].version


def test_migrations_are_numbered_without_gaps() -> None:
    versions = [m.version for m in available_migrations()]
    assert versions == list(range(1, len(versions) + 1))


def test_migrate_0010_keys_the_standard_webhooks_events_stored_before_it(
    database_factory: Callable[..., str],
) -> None:
    url = database_factory()
    migrate(url, target=9)
    long_id = "msg_" + "y" * 300
    rows = [
        ("forms", "k1", {"webhook-id": "msg_A"}),
        ("forms", "k2", {"webhook-id": "msg_A"}),  # a retry the body-hash rule let through
        ("forms", "k3", {"webhook-id": long_id}),
        ("forms", "k4", {}),  # its headers purged
        ("payments", "k5", {"webhook-id": "msg_A"}),  # another source, another message
        ("espocrm", "k6", {"webhook-id": "msg_A"}),  # EspoCRM's deliveries carry no id
    ]
    with psycopg.connect(url, autocommit=True) as conn:
        for source, key, headers in rows:
            conn.execute(
                "INSERT INTO followup.events (source, dedup_key, body, headers, status)"
                " VALUES (%s, %s, '', %s, 'unhandled')",
                (source, key, Jsonb(headers)),
            )
    migrate(url)
    with psycopg.connect(url) as conn:
        kept = conn.execute(
            "SELECT dedup_key, delivery_id FROM followup.events ORDER BY id"
        ).fetchall()
    assert kept == [
        ("k1", "msg_A"),
        ("k2", None),
        ("k3", delivery_key(long_id)),
        ("k4", None),
        ("k5", "msg_A"),
        ("k6", None),
    ]


def test_migrate_0021_converts_the_amounts_stored_before_with_each_currencys_decimals(
    database_factory: Callable[..., str],
) -> None:
    """Amounts stored before 0021 were divided by 100 whatever the currency: each is converted
    again with ``domain/money.py``'s table, an unknown code kept in minor units."""
    url = database_factory()
    migrate(url, target=20)
    stored = [("JPY", "50"), ("EUR", "49.00"), ("kwd", "123.40"), ("XYZ", "50"), (None, "1.5")]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO followup.leads (email, first_source, first_seen_at, last_seen_at)"
            " VALUES ('a@example.com', 'payment', now(), now())"
        )
        for number, (currency, amount) in enumerate(stored):
            conn.execute(
                "INSERT INTO followup.events (source, dedup_key, body, headers, status)"
                " VALUES ('payment', %s, '', '{}', 'done')",
                (f"k{number}",),
            )
            conn.execute(
                "INSERT INTO followup.lead_events (lead_id, event_id, source, kind, received_at,"
                " amount, currency) SELECT 1, max(id), 'payment', 'payment', now(), %s, %s"
                " FROM followup.events",
                (Decimal(amount), currency),
            )
    migrate(url)
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT amount, amount_unit FROM followup.lead_events ORDER BY id"
        ).fetchall()
    assert rows == [
        (Decimal("5000"), "major"),
        (Decimal("49.00"), "major"),
        (Decimal("12.340"), "major"),
        (Decimal("5000"), "minor"),
        (Decimal("150"), "minor"),
    ]


def test_migrate_0021_knows_the_currencies_of_the_money_table() -> None:
    text = next(m for m in available_migrations() if m.version == 21).sql
    lists = [set(re.findall(r"'([A-Z]{3})'", block)) for block in text.split("IN (")[2:]]
    assert lists == [
        set(ZERO_DECIMAL),
        set(THREE_DECIMAL),
        ZERO_DECIMAL | THREE_DECIMAL | TWO_DECIMAL,
    ]
