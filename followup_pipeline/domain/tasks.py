"""What a follow-up task says: the deal, its account, the CRM link, the step and the summary."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from urllib.parse import urlsplit

CLOSE_WORDS = {
    "won": "the deal was won",
    "lost": "the deal was lost",
    "exhausted": "every follow-up step was done and the deal went quiet",
    "subject_gone": "the deal was deleted in the CRM",
    "out_of_scope": "the deal left the watched stages",
}


#: Characters that mean something inside a markdown line (emphasis, code, links, HTML, tables,
#: strike-through), escaped in text taken from the CRM; our lines never start with CRM text, so
#: the line-start markup (#, -, 1.) cannot be reached.
MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]()<>|~&])")
#: What a markdown renderer with autolinks (GFM, ClickUp) turns into a link by itself: URLs with a
#: scheme, ``www.`` hosts and e-mail addresses. Such text is shown as code, which links nothing.
AUTOLINKABLE = re.compile(
    r"(?i)(?:[a-z][a-z0-9+.-]*://|(?:mailto|xmpp):|www\.)\S+|[^\s@]+@[^\s@]+\.[^\s@]+"
)
#: Longest title ClickUp is given (it shows less); the rest is cut with an ellipsis.
TITLE_LIMIT = 250


def plain_line(text: str) -> str:
    """One line of text: control characters (newlines included) become spaces, runs of spaces
    one space."""
    cleaned = "".join(" " if unicodedata.category(ch)[0] == "C" else ch for ch in text)
    return " ".join(cleaned.split())


def markdown_text(text: str) -> str:
    """Text from the CRM as literal markdown: one line, every markup character escaped, and
    anything a renderer would turn into a link by itself shown as code."""
    line = plain_line(text)
    parts = []
    last = 0
    for match in AUTOLINKABLE.finditer(line):
        parts.append(MARKDOWN_SPECIAL.sub(r"\\\1", line[last : match.start()]))
        parts.append("`" + match.group().replace("`", "'") + "`")
        last = match.end()
    parts.append(MARKDOWN_SPECIAL.sub(r"\\\1", line[last:]))
    return "".join(parts)


def safe_link(url: str | None) -> str | None:
    """``url`` if it is an absolute http(s) URL with a host and nothing that could end the
    markdown link early; else None (no link is better than a live foreign one)."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    if any(ch in url for ch in ' ()<>"\\') or plain_line(url) != url:
        return None
    return url


@dataclass(frozen=True)
class TaskContent:
    """The text of one ClickUp task."""

    name: str
    markdown: str


def render_task(
    *,
    deal_name: str,
    account_name: str | None,
    crm_url: str | None,
    step_no: int,
    step_count: int,
    due_on: date,
    summary: tuple[str, str] | None,
) -> TaskContent:
    """The task for step ``step_no`` of ``step_count`` of a deal.

    Names come from the CRM and are not trusted: the title is one plain line, the markdown
    escapes them, and the only link is the CRM's own http(s) URL.
    """
    account = f" ({plain_line(account_name)})" if account_name else ""
    name = f"Follow up: {plain_line(deal_name)}{account}"
    if len(name) > TITLE_LIMIT:
        name = name[: TITLE_LIMIT - 1] + "…"
    name = f"{name} — step {step_no} of {step_count}"
    deal = markdown_text(deal_name)
    lines = [
        f"**Deal:** {deal}",
        f"**Account:** {markdown_text(account_name) if account_name else '—'}",
        f"**Step:** {step_no} of {step_count}, due {due_on.isoformat()}",
    ]
    link = safe_link(crm_url)
    if link:
        lines.append(f"**In the CRM:** [{deal}]({link})")
    if summary:
        lines += [
            "",
            "**Latest e-mails:**",
            f"> {markdown_text(summary[0])}",
            f"> {markdown_text(summary[1])}",
        ]
    return TaskContent(name=name, markdown="\n".join(lines))


def close_comment(reason: str) -> str:
    """The comment left on a task that Followup closes."""
    return f"Closed by Followup: {CLOSE_WORDS.get(reason, reason)}."


def assignees_for(
    crm_user_id: str | None, user_map: Mapping[str, int], default: int | None
) -> list[int]:
    """The ClickUp assignee mapped from the deal's CRM user, else the default, else nobody."""
    if crm_user_id is not None and crm_user_id in user_map:
        return [user_map[crm_user_id]]
    return [default] if default is not None else []
