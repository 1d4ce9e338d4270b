"""What learning reminders need of an LMS site (a tenant's Moodle) and of a credential platform,
as Protocols: the sync reads courses' learners, quizzes and completions; the send re-checks a
completion and sends or reads back a message (Moodle's, or a mail from the tenant's mailbox);
certificates read course completions and issue and read back credentials; publishing shows a
course module and reads it back."""

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Protocol

from followup_pipeline.integrations.errors import SchemaError


class Learner(Protocol):
    """An enrolled user."""

    @property
    def id(self) -> int: ...

    @property
    def fullname(self) -> str: ...

    @property
    def email(self) -> str | None: ...


class Profile(Protocol):
    """A user's profile as Moodle gives it: language and time zone (None: not shown)."""

    @property
    def id(self) -> int: ...

    @property
    def language(self) -> str | None:
        """The primary language (``de_du``: ``de``), None: not given."""
        ...

    @property
    def zone(self) -> str | None:
        """The IANA zone, None: not given, or the site's (``99``)."""
        ...


class QuizInfo(Protocol):
    """A quiz of a course, with its due date (``timeclose``, None: none)."""

    @property
    def id(self) -> int: ...

    @property
    def course(self) -> int: ...

    @property
    def coursemodule(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def timeclose(self) -> datetime | None: ...


class Sent(Protocol):
    """The answer to one message: its id (-1: refused) and the refusal."""

    @property
    def msgid(self) -> int: ...

    @property
    def errormessage(self) -> str | None: ...


class Found(Protocol):
    """A message read back."""

    @property
    def id(self) -> int: ...


class LmsSite(Protocol):
    """A tenant's Moodle, as the reminders use it."""

    def enrolled_users(self, course_id: int) -> Sequence[Learner]:
        """The course's learners."""
        ...

    def quizzes(self, course_ids: Sequence[int]) -> Sequence[QuizInfo]:
        """The courses' quizzes."""
        ...

    def users(self, ids: Sequence[int]) -> Sequence[Profile]:
        """The users' profiles (language and zone, when the token may see them)."""
        ...

    def quizzes_completed(
        self, course_id: int, user_id: int, quizzes: Sequence[tuple[int, int]]
    ) -> set[int]:
        """Which of the course's quizzes (activity id, quiz id) the learner completed, read
        with one call for the course (and one a quiz whose completion is not tracked)."""
        ...

    def send_message(self, user_id: int, text: str, client_msg_id: str) -> Sent:
        """One message to the learner in Moodle."""
        ...

    def find_message(self, user_id: int, marker: str) -> Found | None:
        """The message to the learner whose text holds ``marker``."""
        ...


class Receipt(Protocol):
    """Graph's answer to a mail it took."""

    @property
    def request_id(self) -> str | None: ...


class Mailbox(Protocol):
    """A tenant's mailbox (Graph), as reminders by e-mail use it."""

    def send_mime(
        self,
        *,
        to: list[str],
        subject: str,
        html: str,
        text: str,
        key: str,
        headers: Mapping[str, str] | None = None,
    ) -> Receipt:
        """One message in MIME (a text and an HTML part), with ``headers`` of any name and
        ``key`` in a header, so that ``find_sent`` finds it."""
        ...

    def find_sent(self, key: str, *, properties: Sequence[str] = ...) -> str | None:
        """The id of the sent message that carries ``key`` (looked for in each of
        ``properties`` in turn), None when there is none."""
        ...


class CourseStatus(Protocol):
    """A learner's completion of a course: met or not, and when (None: not said)."""

    @property
    def completed(self) -> bool: ...

    @property
    def completed_at(self) -> datetime | None: ...


class CourseSite(Protocol):
    """What certificates and content publishing need of a tenant's Moodle."""

    def enrolled_users(self, course_id: int) -> Sequence[Learner]:
        """The course's learners."""
        ...

    def course_completion(self, course_id: int, user_id: int) -> CourseStatus:
        """The learner's completion of the course's requirements (Moodle's state)."""
        ...

    def show_module(self, cmid: int, course_id: int) -> None:
        """Make a course module visible to learners."""
        ...

    def module_visible(self, cmid: int) -> bool:
        """Whether the course module is visible to learners now."""
        ...


class Issued(Protocol):
    """A credential on the platform: its id, recipient and whether it carries our key."""

    @property
    def id(self) -> str: ...

    @property
    def email(self) -> str: ...

    def carries(self, key: str) -> bool:
        """Whether it was issued under our ledger ``key``."""
        ...


class CredentialPlatform(Protocol):
    """A tenant's account on the credential platform."""

    def issue(self, *, group_id: int, name: str, email: str, issued_on: date, key: str) -> Issued:
        """Create a credential (no idempotency of the platform's)."""
        ...

    def credential(self, credential_id: str) -> Issued | None:
        """The credential of this id, None when the platform has none."""
        ...

    def in_group(
        self, group_id: int, *, invalid: list[SchemaError] | None = None
    ) -> Iterable[Issued]:
        """Every credential of the group, as the platform holds it now; with ``invalid``, the
        items that broke the schema are kept there and the listing goes on."""
        ...
