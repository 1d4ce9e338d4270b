"""Definitions built from one Settings: no import-time reads, no secrets in os.environ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

DOTENV_SECRETS = {
    "FOLLOWUP_ESPOCRM_API_KEY": "espo-from-dotenv",
    "FOLLOWUP_CLICKUP_TOKEN": "pk_from_dotenv",
    "FOLLOWUP_GRAPH_CLIENT_SECRET": "graph-from-dotenv",
    "FOLLOWUP_MISTRAL_API_KEY": "mistral-from-dotenv",
}

IMPORT_DEFINITIONS = """
import json, os
import followup_pipeline.settings as settings_module
reads = []
original = settings_module.Settings.__init__
def counted(self, *args, **kwargs):
    reads.append(1)
    original(self, *args, **kwargs)
settings_module.Settings.__init__ = counted
before = dict(os.environ)
import followup_pipeline.definitions as module
repository = module.defs.get_repository_def()
print(json.dumps({
    "environ_unchanged": before == dict(os.environ),
    "settings_reads": len(reads),
    "settings_zone": module.settings.timezone,
    "schedule_zones": sorted({s.execution_timezone for s in repository.schedule_defs}),
    "evaluate_partitions_zone": repository.get_job("evaluate").partitions_def.timezone,
}))
"""

IMPORT_EVERY_DEFS_MODULE = """
import importlib, json, pkgutil
import followup_pipeline.defs as package
names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
for name in names:
    importlib.import_module(name)
from followup_pipeline.settings import load_settings
settings = load_settings(timezone="Asia/Tokyo")
capabilities = [m for m in names if m.count(".") == 2]
built = [importlib.import_module(name).build_defs(settings) for name in capabilities]
zones = sorted({s.execution_timezone for d in built for s in (d.schedules or [])})
print(json.dumps({"imported": names, "schedule_zones": zones}))
"""


def _python(script: str, cwd: Path) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FOLLOWUP_", "DAGSTER_"))}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_build_importing_definitions_reads_dotenv_once_and_leaves_environ_alone(
    tmp_path: Path,
) -> None:
    lines = ["FOLLOWUP_TIMEZONE=America/New_York", *(f"{k}={v}" for k, v in DOTENV_SECRETS.items())]
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    seen = _python(IMPORT_DEFINITIONS, tmp_path)
    assert seen["environ_unchanged"] is True
    assert seen["settings_reads"] == 1
    assert seen["settings_zone"] == "America/New_York"
    assert seen["schedule_zones"] == ["America/New_York"]
    assert seen["evaluate_partitions_zone"] == "America/New_York"


def test_build_no_defs_module_reads_settings_at_import(tmp_path: Path) -> None:
    # A .env that no settings can be read from: any import-time read would fail the import.
    (tmp_path / ".env").write_text("FOLLOWUP_TIMEZONE=Not/A_Zone\n")
    seen = _python(IMPORT_EVERY_DEFS_MODULE, tmp_path)
    assert "followup_pipeline.defs.evaluate" in seen["imported"]
    assert "followup_pipeline.defs.register.registrar" in seen["imported"]
    assert seen["schedule_zones"] == ["Asia/Tokyo"]
