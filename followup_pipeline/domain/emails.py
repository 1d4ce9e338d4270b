"""E-mails made fit for a summary: plain text, quoted replies and signatures trimmed, personal
data masked, each capped in length. Pure code: text in, text out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from html.parser import HTMLParser

#: Tags whose content is no text a reader sees.
INVISIBLE = {"script", "style", "head", "title"}
#: Tags that end a line of text.
BLOCKS = {"br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "blockquote"}

#: Lines that start the quoted part of a reply; everything from there on is older mail.
QUOTE_HEADERS = (
    re.compile(r"^\s*On .{3,200}wrote:\s*$", re.IGNORECASE),
    re.compile(r"^\s*Am .{3,200}schrieb .{0,200}:\s*$", re.IGNORECASE),
    re.compile(r"^\s*-{2,}\s*(Original Message|Ursprüngliche Nachricht)\s*-{2,}\s*$", re.I),
    re.compile(r"^\s*_{5,}\s*$"),  # Outlook's rule above the quoted header block
)
#: Outlook's quoted header block: "Von:"/"From:" followed within two lines by "Gesendet:"/"Sent:".
OUTLOOK_FROM = re.compile(r"^\s*(Von|From)\s*:", re.IGNORECASE)
OUTLOOK_SENT = re.compile(r"^\s*(Gesendet|Sent|Date|Datum)\s*:", re.IGNORECASE)
#: Lines that start a signature: a sign-off ends the message (it and what follows are dropped).
SIGNATURE_MARK = re.compile(r"^--\s*$")
SIGN_OFFS = re.compile(
    r"^\s*(mit freundlichen grüßen|mit freundlichem gruß|freundliche grüße|viele grüße|"
    r"beste grüße|liebe grüße|best regards|kind regards|regards|best wishes|cheers|"
    r"thanks and regards|sincerely)[,.!]?\s*$",
    re.IGNORECASE,
)

EMAIL_ADDRESS = re.compile(r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+")
#: An IBAN: a country code (either case), two check digits, then 11 to 30 upper-case letters or
#: digits, in groups separated by nothing, spaces (also non-breaking), or dashes.
IBAN = re.compile(r"(?<![\w])[A-Za-z]{2}[ \u00a0-]?\d{2}(?:[ \u00a0-]?[A-Z0-9]){11,30}(?![\w])")
#: A phone number: an optional "+" or "00" and country code, or a leading 0, or a bracketed area
#: code, then at least 7 more digits with spaces, dashes, slashes, dots or brackets between them.
PHONE = re.compile(r"(?<![\w+])(?:\+|00|0|\()[\d][\d \u00a0()/.-]{5,}\d(?![\w])")
#: What a phone pattern also matches but is no phone number: a date (05.04.2026, 2026-04-05).
DATE = re.compile(r"\d{1,2}\.\d{1,2}\.(?:\d{2}|\d{4})|\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class MailText:
    """One e-mail as the model sees it."""

    sent_at: datetime | None
    sender: str
    subject: str
    body: str


class _TextOfHtml(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in INVISIBLE:
            self.hidden += 1
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in INVISIBLE:
            self.hidden = max(0, self.hidden - 1)
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The text a reader sees in an HTML mail, one line per block."""
    parser = _TextOfHtml()
    parser.feed(html)
    parser.close()
    lines = (
        re.sub(r"[ \t\u00a0]+", " ", line).strip() for line in "".join(parser.parts).split("\n")
    )
    return "\n".join(lines)


def without_quotes(text: str) -> str:
    """The new part of a reply: up to the first quote header; ``>`` lines dropped."""
    lines = text.splitlines()
    kept: list[str] = []
    for index, line in enumerate(lines):
        if any(header.match(line) for header in QUOTE_HEADERS):
            break
        if OUTLOOK_FROM.match(line) and any(
            OUTLOOK_SENT.match(following) for following in lines[index + 1 : index + 3]
        ):
            break
        if line.lstrip().startswith(">"):
            continue
        kept.append(line)
    return "\n".join(kept)


def without_signature(text: str) -> str:
    """The text up to its signature: cut at a ``--`` line or at a sign-off line."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if SIGNATURE_MARK.match(line):
            return "\n".join(lines[:index])
        if SIGN_OFFS.match(line):
            return "\n".join(lines[:index])
    return text


def _phone(match: re.Match[str]) -> str:
    found = match.group(0)
    return found if DATE.fullmatch(found.strip()) else "[phone]"


def masked(text: str) -> str:
    """The text with e-mail addresses, IBANs and phone numbers replaced by placeholders."""
    text = EMAIL_ADDRESS.sub("[e-mail]", text)
    text = IBAN.sub("[IBAN]", text)
    return PHONE.sub(_phone, text)


def mail_text(
    *,
    sent_at: datetime | None,
    sender: str | None,
    subject: str | None,
    body: str | None,
    is_html: bool,
    max_chars: int,
    mask: bool,
) -> MailText:
    """One e-mail fit for the model: plain, trimmed, masked (when asked), capped."""
    text = html_to_text(body or "") if is_html else (body or "")
    text = without_signature(without_quotes(text))
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(line.rstrip() for line in text.splitlines()))
    text = text.strip()
    if len(text) > 2 * max_chars:  # bounds the masking's work; the cap below cuts it anyway
        text = text[: 2 * max_chars]
    sender_text, subject_text = sender or "unknown", subject or ""
    if mask:  # before the cap, so that no address is cut in half and left unmasked
        text, sender_text, subject_text = masked(text), masked(sender_text), masked(subject_text)
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return MailText(sent_at=sent_at, sender=sender_text, subject=subject_text, body=text)
