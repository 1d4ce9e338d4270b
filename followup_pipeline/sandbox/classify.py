"""The sandbox model's lead classification: a deterministic lead.v2 answer for a ``json_schema``
request named ``lead_v2``, valid for the schema the request carries.

It reads only the request, as the real model does: ``intent`` ``buy`` when the lead's message
mentions a price or an offer, else ``question``; ``language`` ``de`` or ``en`` by common words;
``segment`` from the company facts' size; the summary is the message's first sentence (so it
states no fact the input does not hold). Every value is then fitted to the request's own schema
(its enums, bounds and lengths), so a changed schema gets an answer valid for it.
"""

import json
import re
from typing import Any

SCHEMA_NAME = "lead_v2"
#: Words that make a message an intent to buy (any case, anywhere in the message).
BUY_WORDS = ("price", "pricing", "offer", "quote", "angebot", "preis", "kosten", "kaufen")
#: Words that make a message German rather than English, by count.
GERMAN = ("und", "ich", "wir", "sie", "bitte", "für", "mit", "ein", "eine", "der", "die", "das")
ENGLISH = ("and", "i", "we", "you", "please", "for", "with", "a", "an", "the", "is", "are")
_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)", re.DOTALL)
_SIZE = re.compile(r"^- size:\s*(\d[\d.,]*)", re.MULTILINE)
_COMPANY = re.compile(r"^Company \(as the lead gave it\): (?!not given)", re.MULTILINE)


def _user_text(messages: list[dict[str, Any]]) -> str:
    user = [m for m in messages if m.get("role") == "user"]
    return str(user[-1].get("content", "")) if user else ""


def _message(text: str) -> str:
    """The lead's message: what follows the ``Message:`` line (the whole text without one)."""
    _, marker, rest = text.partition("\nMessage:\n")
    message = rest if marker else text
    return "" if message.strip() == "(no message)" else message.strip()


def _language(message: str) -> str:
    words = re.findall(r"[a-zäöüß]+", message.casefold())
    german = sum(word in GERMAN for word in words) + sum(ch in "äöüß" for ch in message.lower())
    english = sum(word in ENGLISH for word in words)
    return "de" if german > english else "en"


def _segment(text: str) -> str:
    size = _SIZE.search(text)
    if size:
        employees = int(re.sub(r"\D", "", size[1]) or 0)
        if employees >= 1000:
            return "enterprise"
        return "mid_market" if employees >= 100 else "small_business"
    return "small_business" if _COMPANY.search(text) else "unknown"


def _summary(message: str, language: str) -> str:
    if not message:
        return "Keine Nachricht." if language == "de" else "No message."
    flat = re.sub(r"\s+", " ", message)
    match = _SENTENCE.match(flat)
    return match[1] if match else flat


def lead_values(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer's values before they are fitted to the request's schema."""
    text = _user_text(messages)
    message = _message(text)
    language = _language(message)
    buy = any(word in message.casefold() for word in BUY_WORDS)
    german = language == "de"
    reasons = {
        (True, True): "Die Nachricht fragt nach Preis oder Angebot.",
        (True, False): "The message asks for a price or an offer.",
        (False, True): "Die Nachricht stellt eine Frage.",
        (False, False): "The message asks a question.",
    }
    said = "Die Nachricht ist auf Deutsch." if german else "The message is in English."
    return {
        "segment": _segment(text),
        "intent": "buy" if buy else "question",
        "priority": 2 if buy else 3,
        "summary": _summary(message, language),
        "language": language,
        "reasons": [reasons[buy, german], said],
    }


def _fit(spec: Any, value: Any) -> Any:
    """``value`` made valid for ``spec``: an enum's member, a number within its bounds, a string
    within its lengths, an array within its counts (each item fitted)."""
    if not isinstance(spec, dict):
        return value
    kind = spec.get("type")
    if isinstance(spec.get("enum"), list) and spec["enum"]:
        return value if value in spec["enum"] else spec["enum"][0]
    if kind in ("integer", "number"):
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else 0
        low, high = spec.get("minimum"), spec.get("maximum")
        number = max(number, low) if isinstance(low, int | float) else number
        return min(number, high) if isinstance(high, int | float) else number
    if kind == "boolean":
        return bool(value)
    if kind == "array":
        items = value if isinstance(value, list) else []
        items = [_fit(spec.get("items"), item) for item in items]
        most, least = spec.get("maxItems"), spec.get("minItems")
        items = items[:most] if isinstance(most, int) else items
        while isinstance(least, int) and len(items) < least:
            items.append(_fit(spec.get("items"), "-"))
        return items
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    longest, shortest = spec.get("maxLength"), spec.get("minLength")
    if isinstance(longest, int) and len(text) > longest:
        text = text[: longest - 1].rstrip() + "…"
    if isinstance(shortest, int) and len(text) < shortest:
        text = text.ljust(shortest, "-")
    return text


def lead_output(messages: list[dict[str, Any]], schema: Any) -> str:
    """The assistant's content for a lead_v2 request: JSON valid for ``schema``."""
    values = lead_values(messages)
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return json.dumps(values, ensure_ascii=False)
    answer = {name: _fit(spec, values.get(name)) for name, spec in properties.items()}
    return json.dumps(answer, ensure_ascii=False)
