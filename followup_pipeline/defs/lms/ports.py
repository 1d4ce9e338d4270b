"""What learning reminders need of an LMS site (a tenant's Moodle), as Protocols: the sync reads
courses' learners, quizzes and completions; the send re-checks a completion and sends or reads
back a message."""

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol


class Learner(Protocol):
    """An enrolled user."""

    @property
    def id(self) -> int: ...

    @property
    def fullname(self) -> str: ...

    @property
    def email(self) -> str | None: ...


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

    def quiz_completed(
        self, course_id: int, user_id: int, coursemodule: int, quiz_id: int | None = None
    ) -> bool:
        """Whether the learner completed the quiz (Moodle's completion state, else a finished
        attempt)."""
        ...

    def send_message(self, user_id: int, text: str, client_msg_id: str) -> Sent:
        """One message to the learner in Moodle."""
        ...

    def find_message(self, user_id: int, marker: str) -> Found | None:
        """The message to the learner whose text holds ``marker``."""
        ...
