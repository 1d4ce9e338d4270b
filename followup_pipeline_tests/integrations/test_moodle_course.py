"""The Moodle client's course functions (a course's completion, a course module read back and
shown) against the fixtures built from Moodle's source (``fixtures/moodle``) through
``httpx.MockTransport``: each request is the fixture's, each answer parses, each error maps by its
``errorcode``; then against the sandbox's double over HTTP: completion follows the quizzes, a
course without one has no criteria, a module added hidden is shown, answers keep the fixtures'
keys in order."""

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from followup_pipeline.integrations.errors import SchemaError
from followup_pipeline.integrations.moodle import MoodleClient, MoodleError
from followup_pipeline.sandbox.config import SandboxConfig

from .test_moodle import BASE, TOKEN, answering, control, fixture, form, params

Handler = Callable[[httpx.Request], httpx.Response]
COMPLETION = "core_completion_get_course_completion_status"
MODULE = "core_course_get_course_module"
SHOW = "core_courseformat_update_course"
#: The keys of a course module that a user who may not manage activities gets (Moodle's
#: ``test_get_course_module``: 12), without ``visible``.
STUDENT_KEYS = "id course module name modname instance section sectionnum groupmode groupingid "
STUDENT_KEYS += "completion downloadcontent"


@pytest.fixture
def make_client(sleeps: list[float]) -> Iterator[Callable[..., MoodleClient]]:
    """A client on a mock transport (None: at ``base`` over HTTP), its sleeps recorded; closed
    after the test."""
    made: list[MoodleClient] = []

    def make(handler: Handler | None, base: str = BASE, token: str = TOKEN) -> MoodleClient:
        transport = httpx.MockTransport(handler) if handler else None
        client = MoodleClient(base, token, transport=transport, sleep=sleeps.append)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_course_completion_sends_the_fixtures_request_and_tells_whether_it_is_complete(
    make_client: Callable[..., MoodleClient],
) -> None:
    published = fixture(COMPLETION)
    seen: list[httpx.Request] = []
    client = make_client(answering({COMPLETION: published["response"]}, seen))
    assert client.course_completed(5, 31) is False
    assert form(seen[0])["wsfunction"] == COMPLETION
    assert params(seen[0]) == published["request"]["params"]
    done = json.loads(json.dumps(published["response"]))
    done["completionstatus"]["completed"] = True
    for criterion in done["completionstatus"]["completions"]:
        criterion |= {"status": "Yes", "complete": True, "timecompleted": 1768129200}
    assert make_client(answering({COMPLETION: done}, seen)).course_completed(5, 31) is True


def test_show_module_sends_the_fixtures_request_and_reads_nothing_of_the_state_updates(
    make_client: Callable[..., MoodleClient],
) -> None:
    published = fixture(SHOW)
    assert isinstance(published["response"], str)  # PARAM_RAW: JSON in a JSON string
    [update] = json.loads(published["response"])
    assert (update["name"], update["action"], update["fields"]["visible"]) == ("cm", "put", True)
    seen: list[httpx.Request] = []
    client = make_client(answering({SHOW: published["response"]}, seen))
    client.show_module(88, 5)
    assert form(seen[0])["wsfunction"] == SHOW
    assert params(seen[0]) == published["request"]["params"]


def test_a_course_module_is_read_with_its_visibility(
    make_client: Callable[..., MoodleClient],
) -> None:
    published = fixture(MODULE)
    seen: list[httpx.Request] = []
    client = make_client(answering({MODULE: published["response"]}, seen))
    module = client.course_module(88)
    assert params(seen[0]) == published["request"]["params"]
    assert (module.id, module.course, module.name, module.modname, module.visible) == (
        88,
        5,
        "Course handbook",
        "page",
        0,
    )
    assert client.module_visible(88) is False
    shown = {"cm": published["response"]["cm"] | {"visible": 1}, "warnings": []}
    assert make_client(answering({MODULE: shown}, seen)).module_visible(88) is True


def test_a_course_module_without_visible_is_a_schema_error_naming_it(
    make_client: Callable[..., MoodleClient],
) -> None:
    cm = fixture(MODULE)["response"]["cm"]
    student = {key: cm[key] for key in STUDENT_KEYS.split()}
    client = make_client(answering({MODULE: {"cm": student, "warnings": []}}, []))
    assert client.course_module(88).visible is None  # readable: the key is optional
    with pytest.raises(SchemaError) as caught:
        client.module_visible(88)
    assert (caught.value.field, caught.value.record_id) == ("visible", "88")


@pytest.mark.parametrize(
    "case",
    [
        "no_completion_criteria",
        "completion_not_enabled",
        "user_not_enrolled",
        "unknown_course_module",
    ],
)
def test_the_course_functions_errors_map_by_their_errorcode(
    case: str, make_client: Callable[..., MoodleClient], sleeps: list[float]
) -> None:
    published = next(c for c in fixture("errors")["cases"] if c["name"] == case)
    body = published["response"]
    seen: list[httpx.Request] = []
    client = make_client(answering({published["request"]["wsfunction"]: body}, seen))
    sent = published["request"]["params"]
    calls: dict[str, Callable[[], Any]] = {
        COMPLETION: lambda: client.course_completed(int(sent.get("courseid", 0)), 31),
        MODULE: lambda: client.module_visible(int(sent.get("cmid", 0))),
    }
    with pytest.raises(MoodleError) as caught:
        calls[published["request"]["wsfunction"]]()
    assert type(caught.value) is MoodleError
    assert (caught.value.errorcode, caught.value.exception) == (
        body["errorcode"],
        body["exception"],
    )
    assert caught.value.function == published["request"]["wsfunction"]
    assert (len(seen), sleeps) == (1, [])


# --- against the sandbox's double, over real HTTP ----------------------------------------------

SITE = "academy-berlin"
SANDBOX_TOKEN = SandboxConfig().moodle_tokens[SITE].get_secret_value()


def added(sandbox: str, table: str, body: Any) -> list[dict[str, Any]]:
    """Records added to Berlin's site through the control API."""
    made: list[dict[str, Any]] = control(sandbox, "POST", f"/moodle/{SITE}/{table}", body)[table]
    return made


@pytest.fixture
def course(sandbox: str) -> dict[str, Any]:
    """Berlin's site with a course of two quizzes and two learners, Lea and Tim."""
    [made] = added(sandbox, "courses", {"fullname": "Statistik", "shortname": "ST"})
    people = [
        {"firstname": "Lea", "lastname": "Brandt", "email": "lea@example.com"},
        {"firstname": "Tim", "lastname": "Vogel", "email": "tim@example.com"},
    ]
    users = added(sandbox, "users", [p | {"course": made["id"]} for p in people])
    quizzes = added(
        sandbox, "quizzes", [{"course": made["id"], "name": f"Quiz {n}"} for n in (1, 2)]
    )
    return {"id": made["id"], "users": users, "quizzes": quizzes}


def call(sandbox: str, function: str, fields: dict[str, str]) -> Any:
    """One raw call of the double, its JSON answer."""
    data = {"wstoken": SANDBOX_TOKEN, "wsfunction": function, "moodlewsrestformat": "json"}
    url = f"{sandbox}/moodle/{SITE}/webservice/rest/server.php"
    return httpx.post(url, data=data | fields, timeout=5).json()


def test_the_double_tells_a_course_complete_once_every_quiz_is(
    sandbox: str, course: dict[str, Any], make_client: Callable[..., MoodleClient]
) -> None:
    client = make_client(None, f"{sandbox}/moodle/{SITE}", SANDBOX_TOKEN)
    lea, tim = (user["id"] for user in course["users"])
    first, second = (quiz["id"] for quiz in course["quizzes"])
    assert client.course_completed(course["id"], lea) is False
    control(sandbox, "POST", f"/moodle/{SITE}/quizzes/{first}/complete", {"userid": lea})
    assert client.course_completed(course["id"], lea) is False
    control(sandbox, "POST", f"/moodle/{SITE}/quizzes/{second}/complete", {"userid": lea})
    assert client.course_completed(course["id"], lea) is True
    assert client.course_completed(course["id"], tim) is False


def test_the_double_refuses_completion_without_criteria_enrolment_or_tracking(
    sandbox: str, course: dict[str, Any], make_client: Callable[..., MoodleClient]
) -> None:
    client = make_client(None, f"{sandbox}/moodle/{SITE}", SANDBOX_TOKEN)
    [empty] = added(sandbox, "courses", {"fullname": "Ohne Quiz", "shortname": "OQ"})
    [ana] = added(
        sandbox, "users", {"firstname": "Ana", "lastname": "Souza", "course": empty["id"]}
    )
    with pytest.raises(MoodleError) as caught:
        client.course_completed(empty["id"], ana["id"])
    assert caught.value.errorcode == "nocriteriaset"
    with pytest.raises(MoodleError) as caught:
        client.course_completed(course["id"], ana["id"])
    assert caught.value.errorcode == "usernotenroled"
    control(sandbox, "PATCH", f"/moodle/{SITE}/courses/{course['id']}", {"enablecompletion": False})
    with pytest.raises(MoodleError) as caught:
        client.course_completed(course["id"], course["users"][0]["id"])
    assert caught.value.errorcode == "cannotviewreport"


def test_a_module_the_double_adds_hidden_is_shown_by_show_module(
    sandbox: str, course: dict[str, Any], make_client: Callable[..., MoodleClient]
) -> None:
    client = make_client(None, f"{sandbox}/moodle/{SITE}", SANDBOX_TOKEN)
    [page] = added(sandbox, "modules", {"course": course["id"], "name": "Handbuch"})
    assert client.module_visible(page["id"]) is False
    client.show_module(page["id"], course["id"])
    assert client.module_visible(page["id"]) is True
    client.show_module(page["id"], course["id"])  # again: nothing changes
    assert client.module_visible(page["id"]) is True
    with pytest.raises(MoodleError) as caught:
        client.module_visible(page["id"] + 1000)
    assert caught.value.errorcode == "invalidrecordunknown"


def test_the_doubles_answers_keep_the_fixtures_keys_in_order(
    sandbox: str, course: dict[str, Any]
) -> None:
    [page] = added(sandbox, "modules", {"course": course["id"], "name": "Handbuch"})
    published = fixture(MODULE)["response"]
    answer = call(sandbox, MODULE, {"cmid": str(page["id"])})
    assert list(answer) == list(published)
    assert list(answer["cm"]) == list(published["cm"])
    unknown = next(c for c in fixture("errors")["cases"] if c["name"] == "unknown_course_module")
    assert call(sandbox, MODULE, {"cmid": "999999"}) == unknown["response"]
    lea = str(course["users"][0]["id"])
    status = call(sandbox, COMPLETION, {"courseid": str(course["id"]), "userid": lea})
    expected = fixture(COMPLETION)["response"]
    assert list(status) == list(expected)
    assert list(status["completionstatus"]) == list(expected["completionstatus"])
    [criterion, *_] = status["completionstatus"]["completions"]
    sample = expected["completionstatus"]["completions"][0]
    assert list(criterion) == list(sample)
    assert list(criterion["details"]) == list(sample["details"])
    fields = {"action": "cm_show", "courseid": str(course["id"]), "ids[0]": str(page["id"])}
    updates = json.loads(call(sandbox, SHOW, fields))
    [published_update] = json.loads(fixture(SHOW)["response"])
    assert [(u["name"], u["action"]) for u in updates] == [("cm", "put")]
    assert set(updates[0]["fields"]) <= set(published_update["fields"])
