"""The Moodle client against the fixtures built from Moodle's source (``fixtures/moodle``)
through ``httpx.MockTransport`` (each fixture's request is what it sends, its answer parses, each
error of ``errors.json`` maps by its ``errorcode``), and against the sandbox's double over HTTP."""

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest

from followup_pipeline.integrations.errors import PermanentError, SchemaError, TransientError
from followup_pipeline.integrations.moodle import (
    ActivityCompletion,
    CompletionState,
    MoodleAccessError,
    MoodleClient,
    MoodleError,
    MoodleTokenError,
    MoodleUser,
    form_fields,
    quiz_is_complete,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "moodle"
TOKEN = "0123456789abcdef0123456789abcdef"
BASE = "https://moodle.example.edu"
TRANSPORT = {"wstoken", "wsfunction", "moodlewsrestformat"}
Handler = Callable[[httpx.Request], httpx.Response]


def fixture(name: str) -> dict[str, Any]:
    """One fixture file: ``{"source", "request", "response"}`` (or the errors' cases)."""
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def form(request: httpx.Request) -> dict[str, str]:
    """The form body the client sent."""
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    return dict(parse_qsl(request.content.decode(), keep_blank_values=True))


def params(request: httpx.Request) -> dict[str, str]:
    """The function's parameters the client sent (the transport fields checked, then left out)."""
    sent = form(request)
    assert sent["wstoken"] == TOKEN
    assert sent["moodlewsrestformat"] == "json"
    return {k: v for k, v in sent.items() if k not in TRANSPORT}


def answering(bodies: dict[str, Any], seen: list[httpx.Request]) -> Handler:
    """Answer each function's request with its body, as Moodle does: HTTP 200 and JSON."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        assert request.method == "POST"
        assert request.url.path == "/webservice/rest/server.php"
        return httpx.Response(200, json=bodies[form(request)["wsfunction"]])

    return handler


@pytest.fixture
def opened() -> Iterator[list[MoodleClient]]:
    """The clients a test made, closed after it."""
    clients: list[MoodleClient] = []
    yield clients
    for made in clients:
        made.close()


@pytest.fixture
def make_client(
    sleeps: list[float], opened: list[MoodleClient]
) -> Callable[[Handler], MoodleClient]:
    """A client on a mock transport, its sleeps recorded."""

    def make(handler: Handler) -> MoodleClient:
        client = MoodleClient(
            BASE, TOKEN, transport=httpx.MockTransport(handler), sleep=sleeps.append
        )
        opened.append(client)
        return client

    return make


def answers(*names: str) -> dict[str, Any]:
    return {name: fixture(name)["response"] for name in names}


def unix(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def test_site_info_sends_the_fixtures_request_and_keeps_no_private_key(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    seen: list[httpx.Request] = []
    client = make_client(answering(answers("core_webservice_get_site_info"), seen))
    info = client.site_info()
    published = fixture("core_webservice_get_site_info")
    assert params(seen[0]) == published["request"]["params"]
    assert (info.sitename, info.userid, info.release) == (
        "Example University Moodle",
        4,
        "5.1 (Build: 20251006)",
    )
    assert info.missing_functions() == []
    assert "userprivateaccesskey" not in repr(info)


def test_enrolled_users_sends_the_fixtures_request_and_lists_the_learners(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    seen: list[httpx.Request] = []
    client = make_client(answering(answers("core_enrol_get_enrolled_users"), seen))
    learners = client.enrolled_users(5)
    assert params(seen[0]) == fixture("core_enrol_get_enrolled_users")["request"]["params"]
    assert [(u.id, u.fullname, u.email) for u in learners] == [
        (31, "Ana Souza", "ana.souza@student.example.edu"),
        (32, "Ben Okafor", "ben.okafor@student.example.edu"),
    ]
    assert learners[0].roles == ("student",)
    assert (learners[0].lang, learners[0].timezone) == (None, None)  # not in the declaration
    everyone = client.enrolled_users(5, roles=None)
    assert [u.id for u in everyone] == [7, 31, 32]
    assert everyone[0].roles == ("editingteacher",)


def test_users_send_the_fixtures_request_with_each_ones_language_and_zone(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    seen: list[httpx.Request] = []
    client = make_client(answering(answers("core_user_get_users_by_field"), seen))
    users = client.users([31, 32, 99])
    assert params(seen[0]) == fixture("core_user_get_users_by_field")["request"]["params"]
    assert [(u.id, u.lang, u.language, u.timezone, u.zone) for u in users] == [
        (31, "pt", "pt", "Europe/Lisbon", "Europe/Lisbon"),
        (32, "en", "en", "99", None),  # 99: the site's time zone, the caller's to fill in
    ]  # 99 is no user: left out, no error
    assert (users.invalid, users[0].email) == ([], "ana.souza@student.example.edu")


def test_users_ask_100_ids_a_call_and_nothing_for_no_ids(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    asked: list[list[int]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent = params(request)
        assert (form(request)["wsfunction"], sent.pop("field")) == (
            "core_user_get_users_by_field",
            "id",
        )
        ids = [int(sent[f"values[{i}]"]) for i in range(len(sent))]
        asked.append(ids)
        return httpx.Response(200, json=[{"id": i, "fullname": f"User {i}"} for i in ids])

    client = make_client(handler)
    users = client.users(list(range(1, 251)))
    assert [len(ids) for ids in asked] == [100, 100, 50]
    assert [u.id for u in users] == list(range(1, 251))
    assert client.users([]) == []
    assert len(asked) == 3  # no ids: no call
    client.users([7, 7, 8])
    assert asked[-1] == [7, 8]  # each id asked once


@pytest.mark.parametrize(
    ("lang", "language"),
    [("de", "de"), ("de_du", "de"), ("en_us", "en"), ("EN", "en"), ("", None), (None, None)],
)
def test_a_users_language_is_the_primary_one_of_its_language_pack(
    lang: str | None, language: str | None
) -> None:
    assert MoodleUser(id=1, fullname="A", lang=lang).language == language


@pytest.mark.parametrize(
    ("timezone", "zone"),
    [
        ("Europe/Berlin", "Europe/Berlin"),
        ("America/Chicago", "America/Chicago"),
        ("99", None),  # the site's
        ("", None),
        (None, None),
        ("Mars/Olympus_Mons", None),
        ("Europe", None),  # a folder of zones, no zone
        ("../../etc/passwd", None),
        ("x" * 5000, None),
    ],
)
def test_a_users_zone_is_one_zoneinfo_knows_or_none(timezone: str | None, zone: str | None) -> None:
    assert MoodleUser(id=1, fullname="A", timezone=timezone).zone == zone


def test_a_user_that_breaks_the_schema_is_reported_by_its_field(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    good = {"id": 31, "fullname": "Ana Souza", "lang": "pt"}
    broken = [{"id": "thirty-two", "fullname": "Ben"}, {"id": 33}, {"id": 34, "fullname": "C"}]
    body = [good, *broken[:2], {**broken[2], "timezone": 2}]
    client = make_client(lambda request: httpx.Response(200, json=body))
    users = client.users([31, 32, 33, 34])
    assert [u.id for u in users] == [31]
    assert [(e.field, e.raw) for e in users.invalid] == [
        ("id", body[1]),
        ("fullname", body[2]),
        ("timezone", body[3]),
    ]
    with pytest.raises(SchemaError) as caught:
        make_client(lambda request: httpx.Response(200, json={"users": []})).users([31])
    assert caught.value.field == "<answer>"


def test_quizzes_send_the_fixtures_request_with_their_deadlines_and_warnings(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    seen: list[httpx.Request] = []
    client = make_client(answering(answers("mod_quiz_get_quizzes_by_courses"), seen))
    quizzes = client.quizzes([5, 8])
    assert params(seen[0]) == fixture("mod_quiz_get_quizzes_by_courses")["request"]["params"]
    assert [(q.id, q.course, q.coursemodule, q.name) for q in quizzes] == [
        (9, 5, 64, "Week 1 check"),
        (12, 5, 87, "Week 3 check"),
    ]
    assert quizzes[1].timeclose == datetime(2026, 1, 12, 23, 59, tzinfo=UTC)
    assert quizzes[1].timeclose.tzinfo is UTC
    assert quizzes.warnings == [
        {
            "item": "course",
            "itemid": 8,
            "warningcode": "1",
            "message": "No access rights in course context",
        }
    ]
    client.quizzes([])
    assert params(seen[1]) == {}  # an empty list cannot be sent: every course of the token


def test_completion_sends_the_fixtures_request_and_tells_a_quiz_complete(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    seen: list[httpx.Request] = []
    name = "core_completion_get_activities_completion_status"
    client = make_client(answering(answers(name), seen))
    statuses = client.completion(5, 31)
    assert params(seen[0]) == fixture(name)["request"]["params"]
    assert [(s.cmid, s.modname, s.instance, s.state) for s in statuses] == [
        (64, "quiz", 9, CompletionState.COMPLETE),
        (87, "quiz", 12, CompletionState.INCOMPLETE),
        (88, "page", 40, CompletionState.INCOMPLETE),
    ]
    assert statuses[0].timecompleted == unix(1766053380)
    assert statuses[1].timecompleted is None
    assert (quiz_is_complete(statuses, 64), quiz_is_complete(statuses, 87)) == (True, False)
    assert quiz_is_complete(statuses, 99) is None  # no completion tracked for it
    assert client.quiz_completed(5, 31, 64) is True
    assert client.quiz_completed(5, 31, 99) is False


def test_quizzes_completed_reads_a_learners_course_once_and_attempts_only_where_untracked(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    seen: list[httpx.Request] = []
    names = ("core_completion_get_activities_completion_status", "mod_quiz_get_user_quiz_attempts")
    client = make_client(answering(answers(*names), seen))
    # 64 complete, 87 not; 99 untracked: its attempts are read (one, in progress: not done)
    assert client.quizzes_completed(5, 31, [(64, 9), (87, 12), (99, 13)]) == {9}
    assert [form(r)["wsfunction"] for r in seen] == list(names)


@pytest.mark.parametrize(("state", "complete"), [(0, False), (1, True), (2, True), (3, False)])
def test_a_quiz_is_complete_in_state_1_or_2(state: int, complete: bool) -> None:
    status = ActivityCompletion(cmid=1, modname="quiz", instance=1, state=state)
    assert quiz_is_complete([status], 1) is complete


def test_quiz_attempts_send_the_fixtures_request(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    seen: list[httpx.Request] = []
    name = "mod_quiz_get_user_quiz_attempts"
    client = make_client(answering(answers(name), seen))
    [attempt] = client.quiz_attempts(12, 31)
    assert params(seen[0]) == fixture(name)["request"]["params"]
    assert (attempt.id, attempt.state, attempt.timefinish) == (9012, "inprogress", None)


def test_send_message_sends_each_message_of_the_fixture_and_returns_a_refusal(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    published = fixture("core_message_send_instant_messages")
    seen: list[httpx.Request] = []
    replies = iter([[published["response"][0]], [published["response"][1]]])

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=next(replies))

    client = make_client(handler)
    sent = client.send_message(
        31, published["request"]["params"]["messages[0][text]"], "qr-87-31-20260111"
    )
    refused = client.send_message(
        32, published["request"]["params"]["messages[1][text]"], "qr-87-32-20260111"
    )
    for index, request in enumerate(seen):  # one message a call: the fixture's, as messages[0]
        expected = {
            key.replace(f"messages[{index}]", "messages[0]"): value
            for key, value in published["request"]["params"].items()
            if key.startswith(f"messages[{index}]")
        }
        assert params(request) == expected
    assert (sent.sent, sent.msgid, sent.clientmsgid, sent.conversationid) == (
        True,
        5521,
        "qr-87-31-20260111",
        118,
    )
    assert sent.timecreated == unix(1768129200)
    assert (refused.sent, refused.msgid) == (False, -1)
    assert refused.errormessage == published["response"][1]["errormessage"]


def test_a_client_msg_id_moodle_would_refuse_is_refused_here(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    client = make_client(lambda request: pytest.fail("nothing may be sent"))
    with pytest.raises(ValueError, match="client_msg_id"):
        client.send_message(31, "Hallo", "qr:87/31")


def test_find_message_sends_the_fixtures_request_and_finds_the_marker(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    seen: list[httpx.Request] = []
    bodies = answers("core_message_get_messages", "core_webservice_get_site_info")
    client = make_client(answering(bodies, seen))
    found = client.find_message(31, "qr-87-31-20260111")
    published = fixture("core_message_get_messages")
    # The sender is the token's user, read once from the site (no extra capability needed).
    assert [form(r)["wsfunction"] for r in seen] == [
        "core_webservice_get_site_info",
        "core_message_get_messages",
    ]
    assert params(seen[1]) == published["request"]["params"]
    assert found is not None
    assert (found.id, found.useridfrom, found.useridto) == (5521, 4, 31)
    assert found.timecreated == unix(1768129200)
    assert client.find_message(31, "qr-87-32-20260111") is None
    assert client.find_message(31, "qr-87", sender_id=0) is not None
    assert params(seen[-1])["useridfrom"] == "0"
    assert len(seen) == 4  # the token's user was read once


@pytest.mark.parametrize("case", [c["name"] for c in fixture("errors")["cases"]])
def test_every_error_maps_by_its_errorcode(
    case: str, make_client: Callable[[Handler], MoodleClient], sleeps: list[float]
) -> None:
    published = next(c for c in fixture("errors")["cases"] if c["name"] == case)
    body = published["response"]
    client = make_client(lambda request: httpx.Response(200, json=body))
    calls: dict[str, Callable[[], Any]] = {
        "core_enrol_get_enrolled_users": lambda: client.enrolled_users(5),
        "core_completion_get_activities_completion_status": lambda: client.completion(5, 31),
        "mod_quiz_get_quizzes_by_courses": lambda: client.quizzes([5]),
        "core_message_send_instant_messages": lambda: client.send_message(31, "Hallo", "qr-1"),
        "core_user_get_users_by_field": lambda: client.users([31]),
    }
    with pytest.raises(MoodleError) as caught:
        calls.get(published["request"]["wsfunction"], client.site_info)()
    error = caught.value
    expected = {
        "invalidtoken": MoodleTokenError,
        "accessexception": MoodleAccessError,
    }.get(body["errorcode"], MoodleError)
    assert type(error) is expected
    assert isinstance(error, PermanentError)
    assert error.errorcode == body["errorcode"]
    assert error.exception == body["exception"]
    assert error.debuginfo == body.get("debuginfo")
    assert body["errorcode"] in str(error)
    assert error.function in str(error)
    assert TOKEN not in str(error)
    assert sleeps == []  # never tried again


def test_site_maintenance_is_transient(make_client: Callable[[Handler], MoodleClient]) -> None:
    body = {"exception": "core\\exception\\moodle_exception", "errorcode": "sitemaintenance"}
    body["message"] = "The site is undergoing maintenance and is currently not available"
    client = make_client(lambda request: httpx.Response(200, json=body))
    with pytest.raises(TransientError, match="maintenance"):
        client.quizzes([5])


def test_a_read_is_retried_on_5xx_and_a_send_never(
    make_client: Callable[[Handler], MoodleClient], sleeps: list[float]
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            503, html="<html><body><h1>503 Service Unavailable</h1></body></html>"
        )

    client = make_client(handler)
    with pytest.raises(TransientError) as caught:
        client.quizzes([5])
    assert (caught.value.status, caught.value.ambiguous, len(seen), len(sleeps)) == (
        503,
        False,
        4,
        3,
    )
    assert "503 Service Unavailable" in str(caught.value)
    with pytest.raises(TransientError) as caught:
        client.send_message(31, "Hallo", "qr-1")
    assert caught.value.ambiguous  # Moodle may have sent it: find_message tells
    assert len(seen) == 5


def test_a_lost_or_unreadable_answer_to_a_send_is_ambiguous(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    def dropped(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected", request=request)

    with pytest.raises(TransientError) as caught:
        make_client(dropped).send_message(31, "Hallo", "qr-1")
    assert caught.value.ambiguous
    truncated = make_client(lambda request: httpx.Response(200, content=b'[{"msgid":55'))
    with pytest.raises(TransientError) as caught:
        truncated.send_message(31, "Hallo", "qr-1")
    assert caught.value.ambiguous


def test_a_record_that_breaks_the_schema_is_reported_with_its_raw_record(
    make_client: Callable[[Handler], MoodleClient],
) -> None:
    users = fixture("core_enrol_get_enrolled_users")["response"]
    broken = {**users[1], "fullname": None}
    body = [users[0], broken, users[2]]
    client = make_client(lambda request: httpx.Response(200, json=body))
    learners = client.enrolled_users(5, roles=None)
    assert [u.id for u in learners] == [7, 32]  # the others survive
    [error] = learners.invalid
    assert (error.record_id, error.field, error.raw) == ("31", "fullname", broken)
    info = {**fixture("core_webservice_get_site_info")["response"], "userid": "four"}
    with pytest.raises(SchemaError) as caught:
        make_client(lambda request: httpx.Response(200, json=info)).site_info()
    assert caught.value.field == "userid"
    assert "userprivateaccesskey" not in caught.value.raw  # a credential is not kept
    with pytest.raises(SchemaError):
        make_client(lambda request: httpx.Response(200, json={"quizzes": "none"})).quizzes([5])


def test_the_token_travels_in_the_body_only(make_client: Callable[[Handler], MoodleClient]) -> None:
    seen: list[httpx.Request] = []
    client = make_client(answering(answers("core_webservice_get_site_info"), seen))
    client.site_info()
    assert TOKEN not in str(seen[0].url)
    assert TOKEN not in repr(client)
    assert form(seen[0])["wstoken"] == TOKEN


def test_parameters_are_written_as_php_reads_them() -> None:
    message = {"touserid": 3, "text": "a&b=c", "clientmsgid": "k-1"}
    assert form_fields({"messages": [message], "newest": True, "old": False, "ids": []}) == {
        "messages[0][touserid]": "3",
        "messages[0][text]": "a&b=c",
        "messages[0][clientmsgid]": "k-1",
        "newest": "1",
        "old": "0",
    }


# --- against the sandbox's double, over real HTTP ----------------------------------------------

SITE = "academy-berlin"
SANDBOX_TOKEN = "sandbox-moodle-berlin-token"


def control(sandbox: str, method: str, path: str, body: Any = None) -> Any:
    with httpx.Client(base_url=sandbox, timeout=5) as client:
        response = client.request(method, f"/_sandbox{path}", json=body)
        response.raise_for_status()
        return response.json()


def sandboxed(
    sandbox: str, sleeps: list[float], opened: list[MoodleClient], token: str = SANDBOX_TOKEN
) -> MoodleClient:
    made = MoodleClient(f"{sandbox}/moodle/{SITE}", token, sleep=sleeps.append)
    opened.append(made)
    return made


@pytest.fixture
def course(sandbox: str) -> dict[str, Any]:
    """Berlin's site with a course, three learners (Paul accepts messages from contacts only),
    a teacher and a quiz closing in a week that Lea completed."""
    site = f"/moodle/{SITE}"
    made = control(sandbox, "POST", f"{site}/courses", {"fullname": "Statistik", "shortname": "ST"})
    course_id = made["courses"][0]["id"]
    people = [
        {"firstname": "Lea", "lastname": "Brandt", "email": "lea@example.com"},
        {"firstname": "Tim", "lastname": "Vogel", "email": "tim@example.com"},
        {
            "firstname": "Paul",
            "lastname": "Kern",
            "email": "paul@example.com",
            "messaging": "onlycontacts",
        },
        {
            "firstname": "Eva",
            "lastname": "Lang",
            "email": "eva@example.com",
            "role": "editingteacher",
        },
    ]
    users = control(sandbox, "POST", f"{site}/users", [p | {"course": course_id} for p in people])[
        "users"
    ]
    week = control(sandbox, "GET", "/clock")["now"]
    closes = datetime.fromisoformat(week).timestamp() + 7 * 86400
    quiz = {"course": course_id, "name": "Quiz 1", "timeclose": int(closes)}
    [made_quiz] = control(sandbox, "POST", f"{site}/quizzes", quiz)["quizzes"]
    control(
        sandbox, "POST", f"{site}/quizzes/{made_quiz['id']}/complete", {"userid": users[0]["id"]}
    )
    return {"id": course_id, "users": users, "quiz": made_quiz}


def test_the_client_reads_and_writes_the_double(
    sandbox: str, course: dict[str, Any], sleeps: list[float], opened: list[MoodleClient]
) -> None:
    client = sandboxed(sandbox, sleeps, opened)
    assert client.site_info().missing_functions() == []
    lea, tim, paul, _teacher = course["users"]
    learners = client.enrolled_users(course["id"])
    assert [u.id for u in learners] == [
        lea["id"],
        tim["id"],
        paul["id"],
    ]  # not Eva, nor the token's user
    [quiz] = client.quizzes([course["id"]])
    assert quiz.timeclose == datetime.fromtimestamp(course["quiz"]["timeclose"], tz=UTC)
    assert client.quiz_completed(course["id"], lea["id"], quiz.coursemodule)
    assert not client.quiz_completed(course["id"], tim["id"], quiz.coursemodule)
    [attempt] = client.quiz_attempts(quiz.id, lea["id"])
    assert attempt.state == "finished"
    assert attempt.timefinish is not None
    sent = client.send_message(tim["id"], "Erinnerung: Quiz 1. Ref qr-1-tim", "qr-1-tim")
    assert sent.sent
    found = client.find_message(tim["id"], "qr-1-tim")
    assert found is not None
    assert found.id == sent.msgid
    refused = client.send_message(paul["id"], "Erinnerung. Ref qr-1-paul", "qr-1-paul")
    assert (refused.sent, refused.clientmsgid) == (False, "qr-1-paul")
    assert "message preferences" in (refused.errormessage or "")
    assert client.find_message(paul["id"], "qr-1-paul") is None
    with pytest.raises(MoodleError) as caught:
        client.find_message(tim["id"], "qr-1-tim", sender_id=0)
    assert caught.value.errorcode == "accessdenied"  # 0 needs moodle/site:readallmessages
    kept = control(sandbox, "GET", f"/moodle/{SITE}/messages")["messages"]
    assert [m["clientmsgid"] for m in kept] == ["qr-1-tim"]


def test_the_double_refuses_a_wrong_token_and_a_function_not_in_the_service(
    sandbox: str, sleeps: list[float], opened: list[MoodleClient]
) -> None:
    with pytest.raises(MoodleTokenError):
        sandboxed(sandbox, sleeps, opened, token="wrong").site_info()
    served = control(sandbox, "GET", f"/moodle/{SITE}")["service"]
    without = [f for f in served if f != "core_message_get_messages"]
    control(sandbox, "PATCH", f"/moodle/{SITE}", {"service": without})
    client = sandboxed(sandbox, sleeps, opened)
    assert client.site_info().missing_functions() == ["core_message_get_messages"]
    with pytest.raises(MoodleAccessError, match="core_message_get_messages"):
        client.find_message(31, "qr")


def test_an_outage_of_the_double_raises_a_transient_error(
    sandbox: str, sleeps: list[float], opened: list[MoodleClient]
) -> None:
    control(sandbox, "POST", "/faults", {"vendor": "moodle", "kind": "outage", "seconds": 30})
    with pytest.raises(TransientError) as caught:
        sandboxed(sandbox, sleeps, opened).quizzes([2])
    assert caught.value.status == 503
    assert len(sleeps) == 3  # four attempts in all


@pytest.mark.parametrize("kind", ["drop_answer", "apply_then_error"])
def test_a_send_whose_answer_is_lost_is_settled_by_reading_back(
    kind: str, sandbox: str, course: dict[str, Any], sleeps: list[float], opened: list[MoodleClient]
) -> None:
    fault = {"vendor": "moodle", "kind": kind, "count": 1}
    control(sandbox, "POST", "/faults", fault | {"function": "core_message_send_instant_messages"})
    client = sandboxed(sandbox, sleeps, opened)
    tim = course["users"][1]
    with pytest.raises(TransientError) as caught:
        client.send_message(tim["id"], "Erinnerung. Ref qr-lost", "qr-lost")
    assert caught.value.ambiguous
    found = client.find_message(tim["id"], "qr-lost")  # it went: not sent again
    assert found is not None
    assert found.fullmessage == "Erinnerung. Ref qr-lost"


def test_the_demo_sites_answer_the_client(
    sandbox: str, sleeps: list[float], opened: list[MoodleClient]
) -> None:
    control(sandbox, "POST", "/reset", {"demo": True})
    now = datetime.fromisoformat(control(sandbox, "GET", "/clock")["now"])
    for site, token in (
        ("academy-berlin", "sandbox-moodle-berlin-token"),
        ("academy-newyork", "sandbox-moodle-newyork-token"),
    ):
        client = MoodleClient(f"{sandbox}/moodle/{site}", token, sleep=sleeps.append)
        opened.append(client)
        quizzes = client.quizzes([])
        assert 2 <= len(quizzes) <= 3
        assert all(q.timeclose and 0 < (q.timeclose - now).days < 14 for q in quizzes)
        learners = client.enrolled_users(quizzes[0].course)
        assert 5 <= len(learners) <= 8
        assert all(u.email and u.email.endswith(("@example.com", ".example")) for u in learners)
        done = [
            client.quiz_completed(q.course, u.id, q.coursemodule) for q in quizzes for u in learners
        ]
        assert any(done)
        assert not all(done)


def test_the_demo_learners_come_with_their_language_and_zone(
    sandbox: str, sleeps: list[float], opened: list[MoodleClient]
) -> None:
    control(sandbox, "POST", "/reset", {"demo": True})
    locales: dict[str, dict[str, tuple[str | None, str | None]]] = {}
    for site, token in (
        ("academy-berlin", "sandbox-moodle-berlin-token"),
        ("academy-newyork", "sandbox-moodle-newyork-token"),
    ):
        client = MoodleClient(f"{sandbox}/moodle/{site}", token, sleep=sleeps.append)
        opened.append(client)
        [course] = {q.course for q in client.quizzes([])}
        learners = client.enrolled_users(course)
        users = client.users([u.id for u in learners])
        assert [u.id for u in users] == [u.id for u in learners]
        locales[site] = {u.fullname: (u.language, u.zone) for u in users}
    berlin, new_york = locales["academy-berlin"], locales["academy-newyork"]
    assert berlin.pop("Jonas Weber") == ("en", None)  # English, the site's time zone (99)
    assert set(berlin.values()) == {("de", "Europe/Berlin")}  # Mia's de_du too
    assert len(berlin) >= 4
    assert new_york.pop("Ethan Williams") == ("en", "America/Chicago")
    assert set(new_york.values()) == {("en", "America/New_York")}
    control(sandbox, "PATCH", f"/moodle/{SITE}", {"userdetails": False})
    client = sandboxed(sandbox, sleeps, opened)
    [course] = {q.course for q in client.quizzes([])}
    learners = client.enrolled_users(course)
    users = client.users([u.id for u in learners])
    assert [u.id for u in users] == [u.id for u in learners]  # still seen: a course shared
    assert {(u.lang, u.language, u.timezone, u.zone) for u in users} == {(None, None, None, None)}
