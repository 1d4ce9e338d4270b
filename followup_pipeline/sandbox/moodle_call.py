"""What every answer of the Moodle double shares (``moodle_functions.py``, ``moodle_course.py``,
``moodle_users.py``): one call's context (``Call``), the exceptions Moodle answers, and records
of declared keys."""

from collections.abc import Callable
from typing import Any

from followup_pipeline.sandbox.moodle_demo import find, now
from followup_pipeline.sandbox.state import Record, SandboxState

MOODLE_EXCEPTION = "core\\exception\\moodle_exception"
PARAMETER_EXCEPTION = "core\\exception\\invalid_parameter_exception"


class MoodleException(Exception):
    """An exception the web service answers as ``{"exception", "errorcode", "message"}``."""

    def __init__(
        self, code: str, message: str, kind: str = MOODLE_EXCEPTION, debuginfo: str = ""
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.kind, self.debuginfo = code, message, kind, debuginfo


def invalid(debuginfo: str) -> MoodleException:
    """``invalid_parameter_exception``: its reason in ``debuginfo`` only."""
    text = "Invalid parameter value detected"
    return MoodleException("invalidparameter", text, PARAMETER_EXCEPTION, debuginfo)


def missing(table: str) -> MoodleException:
    """``dml_missing_record_exception``: a record that ``MUST_EXIST`` does not."""
    text = f"Can not find data record in database table {table}."
    return MoodleException("invalidrecord", text, "dml_missing_record_exception")


def fields(keys: str, *values: Any) -> Record:
    """A record of the space-separated ``keys`` (in declared order) and their values."""
    names = keys.split()
    assert len(names) == len(values), keys
    return dict(zip(names, values, strict=True))


class Call:
    """One call's context: the sandbox, the site's world, its URL, the token's user, the time.
    Users and enrolments are looked up through indexes made once a call (no web service
    function changes them), so a site of 10,000 learners answers in milliseconds."""

    def __init__(self, state: SandboxState, world: Record, url: str) -> None:
        self.state, self.world, self.url = state, world, url
        self.me: Record = find(world, "users", id=world["userid"]) or {}
        self.now = now(state)
        self._users: dict[int, Record] | None = None
        self._courses_of: dict[int, list[int]] | None = None

    def one(self, table: str, record_id: int, name: str) -> Record:
        """A record that ``MUST_EXIST`` (Moodle's table ``name``)."""
        if table == "users":
            if self._users is None:
                self._users = {}
                for user in self.world["users"]:
                    self._users.setdefault(user["id"], user)  # (the first, as find has it)
            found = self._users.get(record_id)
        else:
            found = find(self.world, table, id=record_id)
        if found is None:
            raise missing(name)
        return found

    def enrolled(self, user_id: int) -> list[int]:
        """The ids of the courses a user is enrolled in."""
        if self._courses_of is None:
            self._courses_of = {}
            for row in self.world["enrolments"]:
                self._courses_of.setdefault(row["userid"], []).append(row["courseid"])
        return list(self._courses_of.get(user_id, []))

    def picture(self, size: str) -> str:
        """A user picture's URL (the default one)."""
        return f"{self.url}/theme/image.php/boost/core/1767000000/u/{size}"


Function = Callable[[Call, Record], Any]
