"""Microsoft Graph's reading of a MIME message (base64, ``Content-Type: text/plain``), for the
Graph double's ``sendMail`` and drafts.

Exchange keeps every header it does not map to a property of its own as a named property in the
PS_INTERNET_HEADERS property set, named after the header, its value the header's (MS-OXCMAIL
2.2.3.2.29). Such a property is found with Graph's extended-property ``$filter`` as
``String {00020386-0000-0000-C000-000000000046} Name <header>``; Exchange matches the names of
that set without regard to case (``same_property``).
"""

import base64
import binascii
import email.policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any

PS_INTERNET_HEADERS = "{00020386-0000-0000-C000-000000000046}"
#: Headers Exchange maps to properties of their own (recipients, subject, dates, the body's MIME
#: structure), which are no PS_INTERNET_HEADERS property.
_MAPPED = frozenset(
    {
        "to",
        "cc",
        "bcc",
        "subject",
        "from",
        "sender",
        "reply-to",
        "date",
        "mime-version",
        "message-id",
    }
)


class MimeError(ValueError):
    """A MIME body Graph refuses; ``code`` is its error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def read_mime(body: bytes) -> EmailMessage:
    """The message a base64 MIME body holds; ``MimeError`` if it is no base64."""
    try:
        raw = base64.b64decode(body, validate=True)
    except (ValueError, binascii.Error):
        raise MimeError("ErrorMimeContentInvalidBase64String", "Invalid base64.") from None
    message = BytesParser(policy=email.policy.default).parsebytes(raw)
    if not isinstance(message, EmailMessage):  # the default policy's message_factory
        raise MimeError("ErrorMimeContentInvalid", "Invalid MIME content.")
    return message


def _parts(mime: EmailMessage) -> dict[str, Any]:
    """The first text/plain and text/html parts' content, by content type."""
    parts: dict[str, Any] = {}
    for part in mime.walk():
        kind = part.get_content_type()
        if not part.is_multipart() and kind in ("text/plain", "text/html"):
            try:
                parts.setdefault(kind, part.get_content())
            except (LookupError, ValueError):  # an unknown charset, a broken encoding
                raise MimeError("ErrorMimeContentInvalid", "Invalid MIME content.") from None
    return parts


def _addresses(mime: EmailMessage, name: str) -> list[str]:
    found: list[str] = []
    for header in mime.get_all(name) or []:
        addresses = getattr(header, "addresses", ())
        found += [a.addr_spec for a in addresses if a.addr_spec]
    return found


def mime_message(mime: EmailMessage) -> dict[str, Any]:
    """The Graph message of a MIME message: subject, the HTML body (the text one if there is no
    HTML part), the text body and the ``To`` recipients; ``MimeError`` for unreadable parts."""
    parts = _parts(mime)
    return {
        "subject": str(mime.get("Subject", "")),
        "body": {
            "contentType": "HTML",
            "content": parts.get("text/html", parts.get("text/plain", "")),
        },
        "textBody": parts.get("text/plain"),
        "toRecipients": [{"emailAddress": {"address": a}} for a in _addresses(mime, "To")],
    }


def header_properties(mime: EmailMessage) -> dict[str, Any]:
    """``internetMessageHeaders``: the headers Exchange maps to no property of its own; and for
    each, as Exchange keeps it, a PS_INTERNET_HEADERS named property (its value decoded)."""
    headers = [
        {"name": name, "value": str(value)}
        for name, value in mime.items()
        if name.lower() not in _MAPPED and not name.lower().startswith("content-")
    ]
    return {
        "internetMessageHeaders": headers,
        "singleValueExtendedProperties": [
            {"id": f"String {PS_INTERNET_HEADERS} Name {h['name']}", "value": h["value"]}
            for h in headers
        ],
    }


def _internet_header(prop: str) -> str | None:
    """The header a PS_INTERNET_HEADERS property id names (lower case), else None."""
    kind, _, rest = prop.partition(" ")
    guid, _, name = rest.partition(" Name ")
    if kind == "String" and guid.upper() == PS_INTERNET_HEADERS.upper() and name:
        return name.lower()
    return None


def same_property(wanted: str, stored: str) -> bool:
    """Whether the property id ``wanted`` names the property ``stored``: the same id, or the
    same PS_INTERNET_HEADERS header without regard to case (as Exchange matches those names)."""
    if wanted == stored:
        return True
    header = _internet_header(wanted)
    return header is not None and header == _internet_header(stored)
