"""The sandbox model: a deterministic two-line summary of the e-mails in a prompt."""

import json
import re
from typing import Any

from followup_pipeline.sandbox.classify import SCHEMA_NAME as LEAD_SCHEMA
from followup_pipeline.sandbox.classify import lead_output

_HEADER = re.compile(
    r"^\s*(deal|from|to|cc|date|subject|von|an|datum|betreff|sent|gesendet|e-?mail \d+|#+.*"
    r"|-{3,}.*)\s*[:#-]",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)", re.DOTALL)
MAX_LINE = 140
FALLBACK = "No further activity."


def _first_sentence(block: str) -> str | None:
    lines = [line.strip() for line in block.splitlines()]
    # Headers, greetings ("Hallo Anna,") and instructions ("Summarise:") are not content.
    kept = [line for line in lines if line and not _HEADER.match(line) and line[-1] not in ",:"]
    text = " ".join(kept)
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return None
    match = _SENTENCE.match(text)
    sentence = match[1] if match else text
    return sentence if len(sentence) <= MAX_LINE else sentence[: MAX_LINE - 1].rstrip() + "…"


def summary_lines(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """Two lines: the first sentence of the first and of the last e-mail in the user message."""
    user = [m for m in messages if m.get("role") == "user"]
    text = str(user[-1].get("content", "")) if user else ""
    blocks = [b for b in re.split(r"\n\s*(?:\n|-{3,}|={3,})\s*", text) if b.strip()]
    sentences = [s for s in (_first_sentence(b) for b in blocks) if s]
    if not sentences:
        return "No e-mails to summarise.", FALLBACK
    if len(sentences) == 1:
        return sentences[0], FALLBACK
    return sentences[0], sentences[-1]


def _schema_value(schema: Any, lines: list[str]) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "array":
        return [lines.pop(0) for _ in range(min(2, len(lines)))]
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    return lines.pop(0) if lines else ""


def model_output(messages: list[dict[str, Any]], response_format: Any) -> str:
    """The assistant's content: plain two lines, or JSON as ``response_format`` asks; a
    ``json_schema`` named ``lead_v2`` gets a lead's classification (``sandbox.classify``)."""
    kind = response_format.get("type") if isinstance(response_format, dict) else "text"
    spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
    if kind == "json_schema" and isinstance(spec, dict) and spec.get("name") == LEAD_SCHEMA:
        return lead_output(messages, spec.get("schema"))
    first, second = summary_lines(messages)
    if kind == "json_object":
        return json.dumps({"line1": first, "line2": second}, ensure_ascii=False)
    if kind == "json_schema":
        schema = response_format.get("json_schema", {}).get("schema", {})
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(properties, dict) or not properties:
            return json.dumps({"line1": first, "line2": second}, ensure_ascii=False)
        lines = [first, second]
        answer = {name: _schema_value(spec, lines) for name, spec in properties.items()}
        return json.dumps(answer, ensure_ascii=False)
    return f"{first}\n{second}"
