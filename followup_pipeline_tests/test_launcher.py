"""`followup dev` (what `make run` starts) refuses half-configured vendors. (The machine it starts,
its UI, daemon, quiet console and stop: test_browser.py, on one live machine.)"""

from __future__ import annotations

import os

import pytest

from followup_pipeline.machine import vendor_mode
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.settings import ConfigError, load_settings

SANDBOX = SandboxConfig()
DAEMON_QUERY = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy } } } }"
LOCATION_QUERY = """
{ workspaceOrError { ... on Workspace { locationEntries {
    name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } }
} } } }
"""


def test_launcher_refuses_partial_vendor_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("FOLLOWUP_"):
            monkeypatch.delenv(name)
    assert vendor_mode(load_settings()) == "sandbox"
    monkeypatch.setenv("FOLLOWUP_CLICKUP_TOKEN", "pk_real")
    with pytest.raises(ConfigError) as caught:
        vendor_mode(load_settings())
    for missing in (
        "FOLLOWUP_ESPOCRM_API_KEY",
        "FOLLOWUP_GRAPH_CLIENT_SECRET",
        "FOLLOWUP_MISTRAL_API_KEY",
    ):
        assert missing in str(caught.value)
