"""Moodle's web services (REST protocol): a site's learners (with their language and time zone),
quizzes, completions and attempts, and instant messages to the learners (sent, and read back).

Every call is ``POST {site}/webservice/rest/server.php`` with a form body of ``wstoken``,
``wsfunction``, ``moodlewsrestformat=json`` and the function's parameters in PHP's bracket syntax
(``courseids[0]=5``, ``messages[0][touserid]=31``; booleans as 1/0; an empty list left out). The
token travels in the body only, never in a URL, a log line or an error. Moodle answers its errors
with HTTP 200 and ``{"exception", "errorcode", "message", "debuginfo"?}``; the client branches on
``errorcode`` alone: ``invalidtoken`` is ``MoodleTokenError``, ``accessexception`` (the function is
not in the token's service) ``MoodleAccessError``, ``sitemaintenance`` a ``TransientError``, any
other code a ``MoodleError`` carrying it. 5xx, timeouts and lost connections are the shared
policy's (``http.py``): the reads are retried, a send never is (a lost answer is ambiguous, and
``find_message`` settles it). The form fields and the errors are ``moodle_wire.py``'s. The
contract: docs/vendors.md.
"""

import re
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import httpx

from followup_pipeline.integrations.errors import SchemaError
from followup_pipeline.integrations.http import (
    DEFAULT_TIMEOUTS,
    Clock,
    Sleep,
    Timeouts,
    VendorHttp,
    build_client,
)
from followup_pipeline.integrations.moodle_models import (
    FUNCTIONS,
    ActivityCompletion,
    CompletionState,
    CourseCompletion,
    CourseModule,
    FoundMessage,
    MoodleUser,
    Quiz,
    QuizAttempt,
    Records,
    SentMessage,
    SiteInfo,
    quiz_is_complete,
)
from followup_pipeline.integrations.moodle_wire import (
    VENDOR,
    MoodleAccessError,
    MoodleError,
    MoodleTokenError,
    a_list,
    form_fields,
    listed,
    moodle_error,
    moodle_message,
    one,
    records,
)

__all__ = [
    "FUNCTIONS",
    "ActivityCompletion",
    "CompletionState",
    "FoundMessage",
    "MoodleAccessError",
    "MoodleClient",
    "MoodleError",
    "MoodleTokenError",
    "MoodleUser",
    "Quiz",
    "QuizAttempt",
    "Records",
    "SentMessage",
    "SiteInfo",
    "form_fields",
    "moodle_message",
    "quiz_is_complete",
]

REST_PATH = "webservice/rest/server.php"
#: ``textformat`` of the messages sent: FORMAT_PLAIN (0 MOODLE, 1 HTML, 2 PLAIN, 4 MARKDOWN).
FORMAT_PLAIN = 2
#: The role shortnames of the learners ``enrolled_users`` lists by default.
LEARNER_ROLES = ("student",)
#: How many of the newest messages to a learner ``find_message`` reads.
FIND_LIMIT = 50
#: What Moodle accepts as a ``clientmsgid`` (PARAM_ALPHANUMEXT).
CLIENT_MSG_ID = re.compile(r"[A-Za-z0-9_-]+")
#: Where a message read back carries its text: as sent, shortened, and formatted.
TEXT_FIELDS = ("fullmessage", "smallmessage", "text")
#: How many users ``users`` asks for in one call.
USERS_PER_CALL = 100
#: Fields of the site information that are credentials of the token's user: never kept.
PRIVATE_FIELDS = ("userprivateaccesskey", "sitesecret")

#: The attempt states of a quiz the learner has done (``mod_quiz_get_user_quiz_attempts``).
FINISHED = ("finished", "submitted")


class MoodleClient:
    """One Moodle site's web services, through one token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        transport: httpx.BaseTransport | None = None,
        sleep: Sleep = time.sleep,
        clock: Clock = time.time,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        client = build_client(base_url, transport=transport, timeouts=timeouts)
        self._http = VendorHttp(
            client, vendor=VENDOR, message_of=moodle_message, sleep=sleep, clock=clock
        )
        self._token = token
        self._token_user: int | None = None

    def __repr__(self) -> str:
        return f"MoodleClient({str(self._http.client.base_url)!r})"

    def close(self) -> None:
        """Close the connection pool."""
        self._http.client.close()

    def site_info(self) -> SiteInfo:
        """The site, its release, the token's user and the functions of its service."""
        raw = self._call("core_webservice_get_site_info")
        if isinstance(raw, dict):
            raw = {key: value for key, value in raw.items() if key not in PRIVATE_FIELDS}
        info = one(SiteInfo, raw)
        self._token_user = info.userid
        return info

    def enrolled_users(
        self, course_id: int, *, roles: Collection[str] | None = LEARNER_ROLES
    ) -> Records[MoodleUser]:
        """The course's participants with an active enrolment (``onlyactive``, which needs
        ``moodle/course:enrolreview``) and a role among ``roles`` (by shortname; default the
        learners, ``student``; None: everyone, teachers and the token's user too)."""
        options = [{"name": "onlyactive", "value": "1"}]
        body = self._call(
            "core_enrol_get_enrolled_users", {"courseid": course_id, "options": options}
        )
        users = records(MoodleUser, a_list(body, "users"))
        if roles is not None:
            users[:] = [user for user in users if set(user.roles) & set(roles)]
        return users

    def users(self, ids: Sequence[int]) -> Records[MoodleUser]:
        """The users by id with their ``lang`` and ``timezone`` (``MoodleUser.language`` and
        ``.zone``), which the participants' listing lacks; ``USERS_PER_CALL`` ids a call, no call
        for none. A user Moodle does not know (or the token's user may not see) is left out.
        Either field may be absent: ``lang`` without ``moodle/user:viewalldetails``,
        ``timezone`` when the site hides it (``hiddenuserfields``)."""
        found: Records[MoodleUser] = Records()
        wanted = list(dict.fromkeys(ids))
        for start in range(0, len(wanted), USERS_PER_CALL):
            chunk = wanted[start : start + USERS_PER_CALL]
            body = self._call("core_user_get_users_by_field", {"field": "id", "values": chunk})
            part = records(MoodleUser, a_list(body, "users"))
            found.extend(part)
            found.invalid.extend(part.invalid)
        return found

    def quizzes(self, course_ids: Sequence[int]) -> Records[Quiz]:
        """The quizzes of the courses (none given: of every course of the token's user). A
        course the token cannot reach is a warning (``Records.warnings``), not an error."""
        body = self._call("mod_quiz_get_quizzes_by_courses", {"courseids": list(course_ids)})
        return records(Quiz, *listed(body, "quizzes"))

    def completion(self, course_id: int, user_id: int) -> Records[ActivityCompletion]:
        """The user's completion of each tracked activity of the course."""
        body = self._call(
            "core_completion_get_activities_completion_status",
            {"courseid": course_id, "userid": user_id},
        )
        return records(ActivityCompletion, *listed(body, "statuses"))

    def quiz_completed(
        self, course_id: int, user_id: int, coursemodule: int, quiz_id: int | None = None
    ) -> bool:
        """Whether the user completed the quiz whose activity is ``coursemodule`` (Moodle's
        completion state 1, or 2 passed); where Moodle tracks no completion of it, whether an
        attempt at ``quiz_id`` was finished or submitted (False without ``quiz_id``)."""
        statuses = self.completion(course_id, user_id)
        return self._complete(statuses, user_id, coursemodule, quiz_id)

    def quizzes_completed(
        self, course_id: int, user_id: int, quizzes: Sequence[tuple[int, int]]
    ) -> set[int]:
        """Which of the course's ``quizzes`` (activity id, quiz id) the user completed: one
        completion call for them all (Moodle answers every tracked activity of the course at
        once), and an attempts call only for a quiz whose completion Moodle does not track."""
        statuses = self.completion(course_id, user_id)
        return {
            quiz_id
            for coursemodule, quiz_id in quizzes
            if self._complete(statuses, user_id, coursemodule, quiz_id)
        }

    def _complete(
        self,
        statuses: Sequence[ActivityCompletion],
        user_id: int,
        coursemodule: int,
        quiz_id: int | None,
    ) -> bool:
        """The quiz's completion in ``statuses``; untracked there, a finished attempt."""
        tracked = quiz_is_complete(statuses, coursemodule)
        if tracked is not None or quiz_id is None:
            return tracked is True
        return any(a.state in FINISHED for a in self.quiz_attempts(quiz_id, user_id))

    def quiz_attempts(self, quiz_id: int, user_id: int) -> Records[QuizAttempt]:
        """Every attempt of the user at the quiz, unfinished ones too (previews left out)."""
        params = {"quizid": quiz_id, "userid": user_id, "status": "all", "includepreviews": False}
        body = self._call("mod_quiz_get_user_quiz_attempts", params)
        return records(QuizAttempt, *listed(body, "attempts"))

    def send_message(self, user_id: int, text: str, client_msg_id: str) -> SentMessage:
        """Send ``text`` (plain text, at most 4,096 bytes) to the user from the token's user.
        A refusal (``msgid`` -1) is returned, not raised. Never retried: a lost answer is an
        ambiguous ``TransientError``, and ``find_message`` tells whether it went."""
        if not CLIENT_MSG_ID.fullmatch(client_msg_id):
            raise ValueError(f"client_msg_id {client_msg_id!r}: only A-Z, a-z, 0-9, _ and -")
        message = {"touserid": user_id, "text": text, "textformat": FORMAT_PLAIN}
        message["clientmsgid"] = client_msg_id
        body = self._call(
            "core_message_send_instant_messages", {"messages": [message]}, idempotent=False
        )
        raw = body[0] if isinstance(body, list) and len(body) == 1 else body
        return one(SentMessage, raw)

    def find_message(
        self, user_id: int, marker: str, *, sender_id: int | None = None
    ) -> FoundMessage | None:
        """The newest message to the user whose text contains ``marker`` (a plain
        ``[A-Za-z0-9_-]`` key survives Moodle's formatting), among the 50 newest from
        ``sender_id`` (default: the token's user, which needs no extra capability; 0: anyone,
        which needs ``moodle/site:readallmessages``), read or not; None when there is none."""
        if not marker:
            raise ValueError("marker must not be empty")
        sender = self._sender() if sender_id is None else sender_id
        params = {"useridto": user_id, "useridfrom": sender, "type": "conversations", "read": 2}
        params |= {"newestfirst": True, "limitfrom": 0, "limitnum": FIND_LIMIT}
        raws, _ = listed(self._call("core_message_get_messages", params), "messages")
        for raw in raws:
            texts = [raw.get(k) for k in TEXT_FIELDS] if isinstance(raw, dict) else []
            if any(isinstance(text, str) and marker in text for text in texts):
                return one(FoundMessage, raw)
        return None

    def course_completion(self, course_id: int, user_id: int) -> CourseCompletion:
        """The learner's completion of the course's requirements (Moodle's course completion
        state) and when. A course without criteria or with completion off is a
        ``MoodleError`` (``nocriteriaset``, ``cannotviewreport``)."""
        body = self._call(
            "core_completion_get_course_completion_status",
            {"courseid": course_id, "userid": user_id},
        )
        raw = body.get("completionstatus") if isinstance(body, dict) else body
        return one(CourseCompletion, raw)

    def course_completed(self, course_id: int, user_id: int) -> bool:
        """Whether the learner met the course's completion requirements."""
        return self.course_completion(course_id, user_id).completed

    def course_module(self, cmid: int) -> CourseModule:
        """A course module as the token's user sees it."""
        body = self._call("core_course_get_course_module", {"cmid": cmid})
        raw = body.get("cm") if isinstance(body, dict) else body
        return one(CourseModule, raw)

    def module_visible(self, cmid: int) -> bool:
        """Whether the course module is visible to learners now; a ``SchemaError`` when the
        token's user may not see that (``visible`` needs ``moodle/course:manageactivities``)."""
        module = self.course_module(cmid)
        if module.visible is None:
            problem = "not sent: the token's user may not manage the course's activities"
            raise SchemaError(
                vendor=VENDOR, record_id=str(cmid), field="visible", problem=problem, raw=module
            )
        return module.visible == 1

    def show_module(self, cmid: int, course_id: int) -> None:
        """Make the course module visible (the course format's state action ``cm_show``, which
        replaced the deprecated ``core_course_edit_module``). Showing a shown module changes
        nothing, so a retry is safe."""
        params = {"action": "cm_show", "courseid": course_id, "ids": [cmid]}
        self._call("core_courseformat_update_course", params)

    def _sender(self) -> int:
        if self._token_user is None:
            self.site_info()
        assert self._token_user is not None
        return self._token_user

    def _call(
        self, function: str, params: Mapping[str, Any] | None = None, *, idempotent: bool = True
    ) -> Any:
        """One web-service call: its JSON answer, or the error Moodle's answer means."""
        data = {"wstoken": self._token, "wsfunction": function, "moodlewsrestformat": "json"}
        data |= form_fields(params or {})
        response = self._http.request("POST", REST_PATH, data=data, idempotent=idempotent)
        body = self._http.json(response, ambiguous=not idempotent)
        if isinstance(body, dict) and "exception" in body:
            raise moodle_error(function, body)
        return body
