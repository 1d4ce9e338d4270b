"""The ``evaluate`` harness serves the reports too: the real jobs, real Postgres, the sandbox."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from ..evaluate.conftest import Machine


@pytest.fixture
def machine(db_url: str, sandbox: str, db: psycopg.Connection[Any]) -> Machine:
    """The harness on a fresh database and a reset sandbox, with report recipients."""
    return Machine(
        db_url=db_url,
        sandbox=sandbox,
        db=db,
        settings={"report_recipients": "team@example.com", "report_language": "en"},
    )
