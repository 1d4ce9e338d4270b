"""Text from outside (the CRM, webhooks) made safe to keep: no control characters, no lone
surrogates, bounded."""

from __future__ import annotations

import re
import unicodedata

#: The longest name we keep from the CRM; EspoCRM's own name fields hold 255.
NAME_LIMIT = 255


def clean_text(text: str) -> str:
    """``text`` without control characters (NUL, newlines, escapes) and lone surrogates."""
    kept = "".join(ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cs"))
    return kept.strip()


def cut_at_word(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: whole, or cut after its last whole word that
    fits, with an ellipsis (a single word longer than the limit is cut inside it)."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    whole = text[limit - 1] == " "  # the head ends with a whole word
    kept = head if whole or space <= 0 else head[:space]
    return kept.rstrip(" ,;:.-–—") + "…"


def clean_name(text: str, limit: int = NAME_LIMIT) -> str:
    """A name as we keep it: clean, and cut at ``limit`` characters with an ellipsis."""
    cleaned = clean_text(text)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


#: Legal forms left out when deciding whether a deal's name already names its account.
LEGAL_FORMS = re.compile(
    r"\b(gmbh|ag|kg|ohg|se|ug|e\.?\s?k|gbr|ltd|llc|inc|plc|co|corp|sa|sarl|bv|nv)\b\.?|&|[.,–—-]",
    re.IGNORECASE,
)


def account_shown(deal_name: str, account_name: str | None) -> str | None:
    """The account's name when the deal's name does not say it already (``Bäckerei Hoffmann –
    Pilot`` of ``Bäckerei Hoffmann GmbH`` needs no second mention)."""
    if not account_name:
        return None

    def core(name: str) -> str:
        return " ".join(LEGAL_FORMS.sub(" ", name.casefold()).split())

    account = core(account_name)
    # Whole words: an account "IT" is not named by "Digital Kit".
    named = f" {account} " in f" {core(deal_name)} "
    return None if not account or named else account_name
