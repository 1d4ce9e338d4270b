"""Signed links (docs/architecture.md §12): the one way a mail gives a person without a terminal
something to do — a learner's one-click opt-out, an academy owner's approval of a content version
or acknowledgement of an item. Pure code.

A link is a row (``store/links.py``) bound to what it may do: its purpose, its tenant, and the
learner, the content and version, or the item; one per action, so a resent mail carries the same
link. Its token, in the URL, is ``KID.ID.MAC``: the signing key's name, the row's id (random:
nothing of what it is for can be read back from it) and an HMAC-SHA256 over the purpose, the key
name and the id. A token whose MAC does not verify under any key named in the settings (forged,
altered, or signed by a retired key) is refused before anything is read; the expiry and the
single use are the row's. Keys rotate: the first signs, every key named verifies.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

Purpose = Literal["opt_out", "approve", "acknowledge"]
PURPOSES: tuple[Purpose, ...] = ("opt_out", "approve", "acknowledge")
#: How long a link works after it is first made.
TTL: dict[Purpose, timedelta] = {
    # A reminder's opt-out works as long as a learner may still look at the reminder.
    "opt_out": timedelta(days=90),
    "approve": timedelta(days=14),
    "acknowledge": timedelta(days=14),
}
#: Links spent by their first use (an opt-out may be clicked again: it stays done).
SINGLE_USE: dict[Purpose, bool] = {"opt_out": False, "approve": True, "acknowledge": True}
#: The purpose as it reads in a URL (``/links/opt-out/…``).
SLUG: dict[Purpose, str] = {
    "opt_out": "opt-out",
    "approve": "approve",
    "acknowledge": "acknowledge",
}
#: A key's name, as the settings and the tokens carry it.
KEY_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
#: The shortest secret a key may have, in bytes.
MIN_SECRET = 32
_ID_CHARS = 22
_MAC_CHARS = 32
_TOKEN = re.compile(
    r"^(?P<kid>[A-Za-z0-9_-]{1,32})\.(?P<id>[A-Za-z0-9_-]{22})\.(?P<mac>[A-Za-z0-9_-]{32})$"
)


@dataclass(frozen=True)
class LinkKey:
    """A signing key: its name (in the token) and its secret."""

    name: str
    secret: bytes

    def __repr__(self) -> str:  # never the secret
        return f"LinkKey({self.name!r})"


def purpose_of(slug: str) -> Purpose | None:
    """The purpose a URL's part names, or None."""
    for purpose, known in SLUG.items():
        if known == slug:
            return purpose
    return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def new_link_id() -> str:
    """A new link's id: random, so it says nothing of whom or what it is for."""
    return _b64(secrets.token_bytes(16))[:_ID_CHARS]


def key_name(secret: str) -> str:
    """The name of a key made by the machine itself: a fingerprint of its secret, so two
    different keys never share a name."""
    return "k" + hashlib.sha256(secret.encode()).hexdigest()[:12]


def _mac(key: LinkKey, purpose: Purpose, kid: str, id_: str) -> str:
    message = f"followup-link|{purpose}|{kid}|{id_}".encode()
    return _b64(hmac.new(key.secret, message, hashlib.sha256).digest())[:_MAC_CHARS]


def sign(keys: Sequence[LinkKey], purpose: Purpose, id_: str) -> str:
    """The token of the link ``id_`` for ``purpose``, signed with the first key."""
    if not keys:
        raise ValueError("no key to sign links with")
    key = keys[0]
    return f"{key.name}.{id_}.{_mac(key, purpose, key.name, id_)}"


def verify(keys: Sequence[LinkKey], purpose: Purpose, token: str) -> str | None:
    """The link id of ``token`` when a key named in it signed it for ``purpose``; else None."""
    found = _TOKEN.fullmatch(token)
    if found is None:
        return None
    kid, id_, mac = found["kid"], found["id"], found["mac"]
    for key in keys:
        if key.name == kid and hmac.compare_digest(_mac(key, purpose, kid, id_), mac):
            return id_
    return None


def url(base: str, purpose: Purpose, token: str) -> str:
    """The link as a person clicks it."""
    return f"{base.rstrip('/')}/links/{SLUG[purpose]}/{token}"


def parse_keys(text: str) -> list[LinkKey]:
    """``FOLLOWUP_LINK_KEYS``: ``NAME:SECRET`` pairs separated by commas, newest first (the first
    signs); ``ValueError`` naming what is wrong (a name, a short secret, a name twice)."""
    keys: list[LinkKey] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, secret = part.partition(":")
        if not sep or not KEY_NAME.fullmatch(name):
            raise ValueError(
                "each key is NAME:SECRET, the name of letters, digits, _ or - (at most 32)"
            )
        if len(secret.encode()) < MIN_SECRET:
            raise ValueError(f"key {name!r}: its secret is shorter than {MIN_SECRET} bytes")
        if any(k.name == name for k in keys):
            raise ValueError(f"key {name!r} is named twice")
        keys.append(LinkKey(name, secret.encode()))
    if not keys:
        raise ValueError("no key given")
    return keys
