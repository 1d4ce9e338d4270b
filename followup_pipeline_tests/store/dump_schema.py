"""Regenerate ``followup_pipeline/store/schema.sql``: the ``followup`` schema after all migrations.

Run ``python -m followup_pipeline_tests.store.dump_schema`` (or ``make schema``). It starts a
throwaway embedded Postgres in a temporary folder, migrates an empty database and writes the
normalised ``pg_dump --schema-only``. ``test_migrate`` compares a freshly migrated database with
that file, so a migration that drifts from the intended schema fails until the file is
regenerated and the difference reviewed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import followup_pipeline.store
from followup_pipeline.store.db import SCHEMA
from followup_pipeline.store.embedded import EmbeddedCluster, bin_path
from followup_pipeline.store.migrate import migrate

SCHEMA_FILE = Path(followup_pipeline.store.__file__).parent / "schema.sql"
REGENERATE = "python -m followup_pipeline_tests.store.dump_schema (or: make schema)"
HEADER = (
    "-- The followup schema after every migration: a normalised pg_dump --schema-only.\n"
    f"-- Generated; do not edit. Regenerate with: {REGENERATE}\n"
)
# What pg_dump prints that depends on the server, the client version or chance, not the schema:
# comments (they carry versions), session SETs and set_config, and 18's random \restrict key.
_NOISE = re.compile(r"^(--|SET |SELECT pg_catalog\.set_config\(|\\restrict |\\unrestrict )")


def normalised_dump(url: str) -> str:
    """The ``followup`` schema of the database at ``url``, as pg_dump prints it, without noise."""
    dump = subprocess.run(
        [
            str(bin_path() / "pg_dump"),
            "--schema-only",
            f"--schema={SCHEMA}",
            "--no-owner",
            "--no-privileges",
            url,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    lines = [line.rstrip() for line in dump.splitlines() if not _NOISE.match(line)]
    # Blank lines separate statements; runs of them are left behind by the lines removed.
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return HEADER + "\n" + text + "\n"


def main() -> int:
    """Migrate an empty database on a throwaway cluster and write its dump to ``SCHEMA_FILE``."""
    with tempfile.TemporaryDirectory(prefix="followup-schema-") as home:
        cluster = EmbeddedCluster(Path(home))
        cluster.acquire()
        try:
            url = cluster.url("followup")  # created empty by acquire
            migrate(url)
            SCHEMA_FILE.write_text(normalised_dump(url), encoding="utf-8")
        finally:
            cluster.release()
    print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
