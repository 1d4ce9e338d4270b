"""EspoCRM records as pydantic models, and a listing that keeps the records that broke schema.

EspoCRM names attributes in camelCase and writes datetimes as ``YYYY-MM-DD HH:mm:ss`` in UTC;
the models expose snake_case attributes and timezone-aware datetimes.
"""

from datetime import UTC, date, datetime
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from followup_pipeline.domain.registration import Subject
from followup_pipeline.domain.text import clean_name
from followup_pipeline.integrations.errors import SchemaError, schema_error

ESPO_DATETIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def parse_espo_datetime(value: Any) -> Any:
    """Turn EspoCRM's ``YYYY-MM-DD HH:mm:ss`` (UTC) into an aware datetime; pass others on."""
    if isinstance(value, str) and value:
        try:
            return datetime.strptime(value, ESPO_DATETIME_FORMAT).replace(tzinfo=UTC)
        except ValueError:
            raise ValueError(f"not a datetime 'YYYY-MM-DD HH:mm:ss': {value!r}") from None
    if value == "":
        return None
    return value


#: A name from the CRM as we keep it (no control characters, bounded): the CRM is outside too.
CrmName = Annotated[str, AfterValidator(clean_name)]
OptionalCrmName = Annotated[str | None, AfterValidator(lambda v: clean_name(v) if v else v)]
EspoDateTime = Annotated[datetime, BeforeValidator(parse_espo_datetime)]
EspoOptionalDateTime = Annotated[datetime | None, BeforeValidator(parse_espo_datetime)]


class EspoRecord(BaseModel):
    """Base of the EspoCRM models: camelCase aliases, unknown attributes ignored, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore"
    )

    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")


class Deal(EspoRecord):
    """An Opportunity."""

    name: CrmName
    stage: CrmName
    amount: float | None = None
    amount_currency: str | None = None
    close_date: date | None = None
    account_id: str | None = None
    account_name: OptionalCrmName = None
    contact_id: str | None = None
    contact_name: OptionalCrmName = None
    assigned_user_id: OptionalCrmName = None
    assigned_user_name: OptionalCrmName = None
    description: str | None = None
    created_at: EspoDateTime
    modified_at: EspoDateTime

    def subject(self, crm_url: str | None) -> Subject:
        """What a watch copies from this deal (its names as the CRM has them now)."""
        return Subject(
            subject_id=self.id,
            name=self.name,
            stage=self.stage,
            account_name=self.account_name,
            assigned_user_id=self.assigned_user_id,
            assigned_user_name=self.assigned_user_name,
            crm_url=crm_url,
            amount=self.amount,
            amount_currency=self.amount_currency,
        )


class Email(EspoRecord):
    """An e-mail linked to a deal."""

    name: str | None = None
    subject: str | None = None
    from_address: str | None = None
    to: str | None = None
    date_sent: EspoOptionalDateTime = None
    status: str | None = None
    body: str | None = None
    body_plain: str | None = None
    is_html: bool | None = None
    parent_type: str | None = None
    parent_id: str | None = None
    created_at: EspoOptionalDateTime = None


class Call(EspoRecord):
    """A call linked to a deal; status is Planned, Held or Not Held."""

    name: str | None = None
    status: str | None = None
    date_start: EspoOptionalDateTime = None
    parent_type: str | None = None
    parent_id: str | None = None


class Meeting(Call):
    """A meeting linked to a deal; same shape as a call."""


def _blank_is_none(value: Any) -> Any:
    """EspoCRM writes an empty enum option or a cleared field as ``""``: no value, as null is."""
    return None if value == "" else value


#: A value the CRM may leave empty (``""`` or null), kept as None then.
OptionalCrmText = Annotated[str | None, BeforeValidator(_blank_is_none)]
#: A name the CRM may leave empty, kept as None then, else cleaned like every CRM name.
BlankableCrmName = Annotated[OptionalCrmName, BeforeValidator(_blank_is_none)]


class Lead(EspoRecord):
    """A Lead, as the nightly sweep reads it for the lead intake (docs/vendors.md, Leads).

    Every name is optional: EspoCRM asks for a first or last name only when the lead has no
    account name, e-mail address or phone number (``logicDefs/Lead.json``), and its ``name`` is
    ``NULLIF(TRIM(firstName + ' ' + lastName), '')``, so a lead typed in with only a company and
    an address has no name at all; that is a lead still, not a broken record. ``status`` is
    always set (its enum defaults to ``New``), and the two datetimes are EspoCRM's own."""

    name: BlankableCrmName = None
    first_name: BlankableCrmName = None
    last_name: BlankableCrmName = None
    email_address: OptionalCrmText = None
    phone_number: OptionalCrmText = None
    account_name: BlankableCrmName = None
    status: CrmName
    source: BlankableCrmName = None
    description: str | None = None
    assigned_user_id: OptionalCrmName = None
    created_at: EspoDateTime
    modified_at: EspoDateTime


R = TypeVar("R", bound=EspoRecord)


class Listing(BaseModel, Generic[R]):
    """The records of a listing that parsed, and one ``SchemaError`` per record that did not."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    records: list[R]
    invalid: list[SchemaError] = []


DealListing = Listing[Deal]


def parse_records(model: type[R], raws: list[Any]) -> Listing[R]:
    """Validate each raw record on its own, so one bad record does not spoil the page."""
    records: list[R] = []
    invalid: list[SchemaError] = []
    for raw in raws:
        try:
            records.append(model.model_validate(raw))
        except ValidationError as exc:
            invalid.append(schema_error(raw, exc, vendor="espocrm"))
    return Listing[model](records=records, invalid=invalid)  # type: ignore[valid-type]
