"""Text from outside (the CRM, webhooks) made safe to keep: no control characters, no lone
surrogates, bounded."""

from __future__ import annotations

import unicodedata

#: The longest name we keep from the CRM; EspoCRM's own name fields hold 255.
NAME_LIMIT = 255


def clean_text(text: str) -> str:
    """``text`` without control characters (NUL, newlines, escapes) and lone surrogates."""
    kept = "".join(ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cs"))
    return kept.strip()


def clean_name(text: str, limit: int = NAME_LIMIT) -> str:
    """A name as we keep it: clean, and cut at ``limit`` characters with an ellipsis."""
    cleaned = clean_text(text)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"
