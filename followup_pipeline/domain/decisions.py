"""What a deal's stage means for its watch: open one, close it (and why), or nothing."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

CloseReason = Literal["won", "lost", "exhausted", "subject_gone", "out_of_scope", "unwatched"]
CLOSE_REASONS: tuple[CloseReason, ...] = (
    "won",
    "lost",
    "exhausted",
    "subject_gone",
    "out_of_scope",
    "unwatched",
)


@dataclass(frozen=True)
class StagePolicy:
    """The stages that matter: those we watch, and those that mean won or lost."""

    watched: Collection[str]
    won: str
    lost: str


@dataclass(frozen=True)
class Open:
    """Open a watch (or keep the open one)."""


@dataclass(frozen=True)
class Close:
    """Close the open watch, if any, for ``reason``."""

    reason: CloseReason


Decision = Open | Close


def decide_for_stage(stage: str | None, policy: StagePolicy) -> Decision:
    """A deal in ``stage`` (None: deleted) opens, or closes its watch with a reason."""
    if stage is None:
        return Close("subject_gone")
    if stage in policy.watched:
        return Open()
    if stage == policy.won:
        return Close("won")
    if stage == policy.lost:
        return Close("lost")
    return Close("out_of_scope")
