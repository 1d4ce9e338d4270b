"""The records of Moodle's web services the client returns (``moodle.py``), as pydantic models
of the fields we rely on (the rest ignored): Unix seconds as aware UTC datetimes, 0 as None."""

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from enum import IntEnum
from functools import cache
from typing import Annotated, Any, TypeVar
from zoneinfo import available_timezones

from pydantic import BaseModel, BeforeValidator, ConfigDict

from followup_pipeline.integrations.errors import SchemaError

#: The functions this client calls: the token's external service must include each one
#: (``SiteInfo.functions`` lists what it includes).
FUNCTIONS = (
    "core_webservice_get_site_info",
    "core_enrol_get_enrolled_users",
    "mod_quiz_get_quizzes_by_courses",
    "core_completion_get_activities_completion_status",
    "mod_quiz_get_user_quiz_attempts",
    "core_message_send_instant_messages",
    "core_message_get_messages",
    "core_completion_get_course_completion_status",
    "core_courseformat_update_course",
    "core_course_get_course_module",
    "core_user_get_users_by_field",
)
#: ``timezone`` of a user who follows the site's time zone.
SITE_TIMEZONE = "99"

T = TypeVar("T")


def _unix_time(value: Any) -> datetime | None:
    """Moodle's Unix seconds as an aware UTC datetime; 0 and null mean none."""
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected Unix seconds, got {value!r}")
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError):  # past the year 9999: a value pydantic can name
        raise ValueError(f"Unix seconds out of range: {value!r}") from None


UnixTime = Annotated[datetime | None, BeforeValidator(_unix_time)]
#: A moment that must be there (0 or null break the schema).
UnixMoment = Annotated[datetime, BeforeValidator(_unix_time)]


def _names(key: str) -> BeforeValidator:
    """A list of objects read as the tuple of their ``key`` values."""

    def pick(value: Any) -> Any:
        if isinstance(value, list):
            return tuple(item.get(key) if isinstance(item, dict) else item for item in value)
        return value

    return BeforeValidator(pick)


@cache
def _zones() -> frozenset[str]:
    """The IANA zones ``zoneinfo`` knows (a lookup by name, so no odd name reaches a file)."""
    return frozenset(available_timezones())


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class MoodleUser(_Record):
    """A participant of a course (``core_enrol_get_enrolled_users``), or a user read by id
    (``core_user_get_users_by_field``). Moodle leaves ``email`` out when the token's user may
    not see it. Only the users read by id carry ``lang`` (a language pack: ``de``, ``en_us``,
    ``de_du``; it needs ``moodle/user:viewalldetails``) and ``timezone`` (an IANA zone, or
    ``"99"``: the site's); the listing's declaration has neither, so they are None from it."""

    id: int
    fullname: str
    email: str | None = None
    lang: str | None = None
    timezone: str | None = None
    #: The role shortnames in the course (``student``, ``editingteacher``, …): teachers are
    #: participants too.
    roles: Annotated[tuple[str, ...], _names("shortname")] = ()

    @property
    def language(self) -> str | None:
        """The primary language of ``lang``, lower case (``de_du`` → ``de``); None without
        one (the caller falls back to the academy's)."""
        primary = (self.lang or "").strip().replace("-", "_").split("_")[0].lower()
        return primary if primary.isascii() and primary.isalpha() else None

    @property
    def zone(self) -> str | None:
        """The user's IANA time zone; None when Moodle sent none, ``"99"`` (the site's), or a
        name ``zoneinfo`` does not know (the caller falls back to the academy's)."""
        name = (self.timezone or "").strip()
        return name if name != SITE_TIMEZONE and name in _zones() else None


class Quiz(_Record):
    """A quiz (``mod_quiz_get_quizzes_by_courses``): ``id`` is the quiz, ``coursemodule`` its
    activity (the ``cmid`` of completions). ``timeclose`` has the token user's own overrides
    applied, not a learner's; None when the quiz never closes (or the token may not see it)."""

    id: int
    course: int
    coursemodule: int
    name: str
    timeopen: UnixTime = None
    timeclose: UnixTime = None


class CompletionState(IntEnum):
    """``state`` of an activity's completion."""

    INCOMPLETE = 0
    COMPLETE = 1
    COMPLETE_PASS = 2
    COMPLETE_FAIL = 3


class ActivityCompletion(_Record):
    """One activity's completion for one user (``core_completion_…_completion_status``); only
    activities with completion tracking are listed."""

    cmid: int
    modname: str
    instance: int
    state: CompletionState
    timecompleted: UnixTime = None


class QuizAttempt(_Record):
    """An attempt (``mod_quiz_get_user_quiz_attempts``): ``state`` is ``notstarted``,
    ``inprogress``, ``overdue``, ``submitted``, ``finished`` or ``abandoned``; ``timefinish``
    None until it is submitted."""

    id: int
    state: str | None = None
    timefinish: UnixTime = None


class SentMessage(_Record):
    """The answer to one instant message: ``msgid`` -1 is a refusal (no such user, too long,
    the learner's privacy setting) with Moodle's ``errormessage``; the caller records it as
    failed. ``clientmsgid`` is only echoed: Moodle never checks it for duplicates."""

    msgid: int
    clientmsgid: str | None = None
    errormessage: str | None = None
    conversationid: int | None = None
    timecreated: UnixTime = None

    @property
    def sent(self) -> bool:
        """Whether Moodle took the message."""
        return self.msgid != -1


class FoundMessage(_Record):
    """A message read back (``core_message_get_messages``): ``fullmessage`` as it was sent."""

    id: int
    useridfrom: int
    useridto: int
    fullmessage: str
    timecreated: UnixMoment
    timeread: UnixTime = None


class SiteInfo(_Record):
    """The site and the token's user (``core_webservice_get_site_info``), for ``doctor``."""

    sitename: str
    siteurl: str | None = None
    userid: int
    fullname: str | None = None
    release: str | None = None
    #: The functions of the token's service.
    functions: Annotated[tuple[str, ...], _names("name")] = ()

    def missing_functions(self) -> list[str]:
        """The functions this client calls that the token's service lacks."""
        return [name for name in FUNCTIONS if name not in self.functions]


class Records(list[T]):
    """The records of a listing that parsed (it is a list of them); ``invalid`` holds one
    ``SchemaError`` per record that did not, with its raw record, and ``warnings`` Moodle's
    (``{"item", "itemid", "warningcode", "message"}``: e.g. a course the token cannot reach)."""

    def __init__(
        self, records: Iterable[T] = (), *, invalid: Iterable[SchemaError] = (), warnings: Any = ()
    ) -> None:
        super().__init__(records)
        self.invalid = list(invalid)
        self.warnings: list[dict[str, Any]] = [w for w in warnings if isinstance(w, dict)]


def quiz_is_complete(statuses: Sequence[ActivityCompletion], coursemodule: int) -> bool | None:
    """Whether the quiz whose activity is ``coursemodule`` is complete for the user (state 1,
    or 2: passed; 3 is completed and failed, not complete); None when ``statuses`` has none for
    it (no completion tracking, or hidden from the token's user): then read the attempts."""
    for status in statuses:
        if status.cmid == coursemodule:
            return status.state in (CompletionState.COMPLETE, CompletionState.COMPLETE_PASS)
    return None


class CompletionCriterion(_Record):
    """One criterion of a course's completion, and when the learner met it (None: not yet)."""

    type: int
    complete: bool
    timecompleted: UnixTime = None


class CourseCompletion(_Record):
    """A learner's course completion (``core_completion_get_course_completion_status``'s
    ``completionstatus``): whether they met the course's requirements, and when."""

    completed: bool
    aggregation: int
    completions: tuple[CompletionCriterion, ...] = ()

    @property
    def completed_at(self) -> datetime | None:
        """When the course was completed: its last criterion met (None when not, or when
        Moodle says no time)."""
        times = [c.timecompleted for c in self.completions if c.timecompleted is not None]
        return max(times) if self.completed and times else None


class CourseModule(_Record):
    """A course module (``core_course_get_course_module``'s ``cm``). ``visible`` is only sent to
    a token whose user may manage the course's activities; None otherwise."""

    id: int
    course: int
    name: str
    modname: str
    visible: int | None = None
