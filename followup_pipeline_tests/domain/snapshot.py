"""The rendered mails' snapshots (``snapshots/``): a rendering must equal its file, byte for
byte. Run with ``FOLLOWUP_UPDATE_SNAPSHOTS=1`` to write them anew after a wanted change, then
review the diff."""

from __future__ import annotations

import os
from pathlib import Path

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("FOLLOWUP_UPDATE_SNAPSHOTS") == "1"  # read once, at import


def match_snapshot(name: str, content: str) -> None:
    """``content`` equals the snapshot ``name`` (written anew with ``UPDATE``)."""
    path = SNAPSHOTS / name
    if UPDATE:
        path.write_text(content, encoding="utf-8")
    assert content == path.read_text(encoding="utf-8")
