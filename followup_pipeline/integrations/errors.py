"""The errors every vendor client raises, so callers decide by kind, never by vendor.

::

    IntegrationError                 anything that went wrong talking to a vendor
    ├── TransientError               retry later: 429, 5xx, timeout, connection error
    │                                 .retry_after  seconds, if the vendor said
    │                                 .ambiguous    True when a create may have happened
    │                                               (the action ledger marks it `unknown`)
    └── PermanentError               skip the item: 400, 401, 403, 409, 422, …
        │                             .status, .vendor_message
        ├── NotFoundError            404: the object is gone
        └── SchemaError              a record broke its schema: .record_id, .field, .raw

Messages carry the vendor, the status and the vendor's own reason, never a credential.
"""

from typing import Any

from pydantic import ValidationError


class IntegrationError(Exception):
    """Base of every error raised by the vendor clients."""

    def __init__(self, message: str, *, vendor: str) -> None:
        super().__init__(f"{vendor}: {message}")
        self.vendor = vendor


class TransientError(IntegrationError):
    """The vendor is busy or unreachable: try again later.

    ``ambiguous`` is True when the request was a create whose outcome is unknown (a timeout
    or a dropped connection after sending): the caller must look before creating again.
    """

    def __init__(
        self,
        message: str,
        *,
        vendor: str,
        status: int | None = None,
        retry_after: float | None = None,
        ambiguous: bool = False,
    ) -> None:
        super().__init__(message, vendor=vendor)
        self.status = status
        self.retry_after = retry_after
        self.ambiguous = ambiguous


class PermanentError(IntegrationError):
    """The vendor refused this request; retrying it unchanged will not help."""

    def __init__(
        self, message: str, *, vendor: str, status: int | None = None, vendor_message: str = ""
    ) -> None:
        super().__init__(message, vendor=vendor)
        self.status = status
        self.vendor_message = vendor_message


class NotFoundError(PermanentError):
    """The object does not exist (HTTP 404)."""


class SchemaError(PermanentError):
    """One record does not match the schema we rely on; the raw record is kept."""

    def __init__(
        self, *, vendor: str, record_id: str | None, field: str, problem: str, raw: Any
    ) -> None:
        super().__init__(
            f"record {record_id or '<no id>'}: field {field!r}: {problem}", vendor=vendor
        )
        self.record_id = record_id
        self.field = field
        self.problem = problem
        self.raw = raw


def schema_error(raw: Any, exc: ValidationError, *, vendor: str) -> SchemaError:
    """A ``SchemaError`` naming the record's id and the first field that failed validation."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "<record>"
    record_id = raw.get("id") if isinstance(raw, dict) else None
    return SchemaError(
        vendor=vendor,
        record_id=str(record_id) if record_id is not None else None,
        field=field,
        problem=str(first["msg"]),
        raw=raw,
    )
