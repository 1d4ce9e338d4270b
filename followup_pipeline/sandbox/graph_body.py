"""Microsoft Graph's reading of a JSON request body and of the ``{id | userPrincipalName}`` in a
path, for the Graph double.

Graph matches a body's property names to its types without regard to case (``Message``,
``ToRecipients`` and ``SaveToSentItems`` are ``message``, ``toRecipients`` and
``saveToSentItems``), and refuses a name its type does not define with 400 ``RequestBodyRead``.
Here each body is rewritten to the canonical names once it is read, so the rest of the double
sees one casing. A path names a user by UPN (case-insensitive) or by object id; a user the tenant
does not have is Graph's 404 ``ErrorInvalidUser``.
"""

import uuid
from collections.abc import Iterable
from typing import Any

#: Each type's properties: canonical name → the property's type (``None``: a primitive or enum;
#: a one-item tuple: a collection of that type; ``"open"``: kept as sent).
_TYPES: dict[str, dict[str, Any]] = {
    "sendMail": {"message": "message", "saveToSentItems": None},
    "message": {
        **dict.fromkeys(
            (
                "id",
                "subject",
                "bodyPreview",
                "importance",
                "categories",
                "changeKey",
                "conversationId",
                "conversationIndex",
                "createdDateTime",
                "lastModifiedDateTime",
                "receivedDateTime",
                "sentDateTime",
                "hasAttachments",
                "inferenceClassification",
                "internetMessageId",
                "isDeliveryReceiptRequested",
                "isDraft",
                "isRead",
                "isReadReceiptRequested",
                "parentFolderId",
                "webLink",
            )
        ),
        "body": "itemBody",
        "uniqueBody": "itemBody",
        "from": "recipient",
        "sender": "recipient",
        "toRecipients": ("recipient",),
        "ccRecipients": ("recipient",),
        "bccRecipients": ("recipient",),
        "replyTo": ("recipient",),
        "internetMessageHeaders": ("internetMessageHeader",),
        "singleValueExtendedProperties": ("extendedProperty",),
        "multiValueExtendedProperties": ("extendedProperty",),
        "flag": "followupFlag",
        # Attachments are of derived types (fileAttachment, itemAttachment, …) named by
        # ``@odata.type``; the sandbox keeps them as sent.
        "attachments": ("open",),
        "extensions": ("open",),
    },
    "itemBody": {"contentType": None, "content": None},
    "recipient": {"emailAddress": "emailAddress"},
    "emailAddress": {"address": None, "name": None},
    "internetMessageHeader": {"name": None, "value": None},
    "extendedProperty": {"id": None, "value": None},
    "followupFlag": {
        "flagStatus": None,
        "completedDateTime": "dateTimeTimeZone",
        "dueDateTime": "dateTimeTimeZone",
        "startDateTime": "dateTimeTimeZone",
    },
    "dateTimeTimeZone": {"dateTime": None, "timeZone": None},
}
_LOWER = {name: {key.lower(): key for key in props} for name, props in _TYPES.items()}


class BodyError(ValueError):
    """A body Graph refuses with 400 ``RequestBodyRead``."""


def _object(value: Any, kind: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BodyError(f"Cannot read a value of type 'microsoft.graph.{kind}' from the payload.")
    result: dict[str, Any] = {}
    for key, item in value.items():
        if "@" in key:  # an annotation such as "@odata.type": kept as it is
            result[key] = item
            continue
        name = _LOWER[kind].get(key.lower())
        if name is None:
            if kind == "sendMail":
                raise BodyError(
                    f"The parameter '{key}' in the request payload is not a valid parameter "
                    "for the operation 'sendMail'."
                )
            raise BodyError(
                f"The property '{key}' does not exist on type 'microsoft.graph.{kind}'. Make "
                "sure to only use property names that are defined by the type or mark the type "
                "as open type."
            )
        result[name] = _value(item, _TYPES[kind][name])
    return result


def _value(value: Any, kind: Any) -> Any:
    if kind is None or kind == "open" or value is None:
        return value
    if isinstance(kind, tuple):
        if not isinstance(value, list):
            raise BodyError("A collection was expected in the payload.")
        return [_value(item, kind[0]) for item in value]
    return _object(value, kind)


def canonical(body: Any, kind: str) -> dict[str, Any]:
    """``body`` (an action's parameters, or a resource of type ``kind``) with every property
    named as Graph names it; ``BodyError`` for a name the type does not have."""
    return _object(body, kind)


def as_boolean(value: Any) -> bool:
    """An ``Edm.Boolean`` as Graph reads it: ``true``/``false``, or the same as a string (Graph's
    own sendMail example sends ``"saveToSentItems": "false"``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise BodyError(f"Cannot convert the literal '{value}' to the expected type 'Edm.Boolean'.")


def user_id(address: str) -> str:
    """The object id of the sandbox's user with ``address`` (a GUID, stable across runs)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"sandbox-user:{address.lower()}"))


def mailbox_of(user: str, mailboxes: Iterable[str]) -> str | None:
    """The mailbox a path's ``{id | userPrincipalName}`` names, or None: the tenant has no such
    user. A UPN is matched without regard to case, an id as Graph gives it."""
    wanted = user.lower()
    for address in mailboxes:
        if address.lower() == wanted or user_id(address) == wanted:
            return address
    return None
