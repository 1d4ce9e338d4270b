"""The Moodle double against the fixtures built from Moodle's source (``fixtures/moodle``): the
same requests get answers of the same shapes (keys, types, nesting, declared order), errors come
as Moodle writes them; its control API, faults, demo sites and the world kept across restarts."""

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from followup_pipeline.integrations.moodle import FUNCTIONS as CLIENT_FUNCTIONS
from followup_pipeline.sandbox import (
    SandboxConfig,
    create_app,
    moodle_functions,
    persist,
    sandbox_state,
)
from followup_pipeline.sandbox.moodle import SERVED_FUNCTIONS
from followup_pipeline.sandbox.moodle_course import COURSE_FUNCTIONS
from followup_pipeline.sandbox.moodle_demo import SERVED, load_demo
from followup_pipeline.sandbox.moodle_functions import FUNCTIONS
from followup_pipeline.sandbox.moodle_users import USER_FUNCTIONS
from followup_pipeline_tests.sandbox.conftest import Sandbox, SandboxFactory

pytestmark = pytest.mark.anyio
FIXTURES = Path(__file__).parent.parent / "fixtures" / "moodle"
SITE = "academy-berlin"
TOKEN = "sandbox-moodle-berlin-token"
URL = f"/moodle/{SITE}/webservice/rest/server.php"
CONTROL = f"/_sandbox/moodle/{SITE}"
#: The fixtures' moment: the Week 3 check is open, the Week 1 check closed.
START = datetime(2026, 1, 11, 9, 0, tzinfo=UTC)


def fixture(name: str) -> dict[str, Any]:
    """One fixture file: ``{"source", "request", "response"}`` (or the errors' cases)."""
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def error_case(name: str) -> dict[str, Any]:
    """One case of ``errors.json``."""
    return next(case for case in fixture("errors")["cases"] if case["name"] == name)


def _types(values: list[Any]) -> set[type]:
    return {type(value) for value in values}


def conforms(actual: Any, samples: list[Any], where: str = "answer") -> None:
    """``actual`` has the shape of the ``samples`` (values at the same place of a fixture):
    the keys of a record among theirs and every key all of them have, each value of a type they
    show (null where one is null), keys in their order, lists of records of their shape."""
    kinds = _types(samples)
    if dict in kinds:
        assert isinstance(actual, dict), f"{where}: {actual!r} is no object"
        records = [s for s in samples if isinstance(s, dict)]
        union = {key for record in records for key in record}
        common = set.intersection(*(set(record) for record in records))
        assert set(actual) <= union, f"{where}: keys {set(actual) - union} not in the fixture"
        assert common <= set(actual), f"{where}: keys {common - set(actual)} missing"
        for record in records:  # the declared order
            shared = [key for key in record if key in actual]
            assert [key for key in actual if key in record] == shared, f"{where}: key order"
        for key, value in actual.items():
            conforms(value, [r[key] for r in records if key in r], f"{where}.{key}")
    elif list in kinds:
        assert isinstance(actual, list), f"{where}: {actual!r} is no list"
        items = [item for sample in samples if isinstance(sample, list) for item in sample]
        for index, item in enumerate(actual):
            if items:
                conforms(item, items, f"{where}[{index}]")
    else:
        assert type(actual) in kinds or (actual is None and type(None) in kinds), (
            f"{where}: {actual!r} is not of the fixture's type {kinds}"
        )


async def call(sandbox: Sandbox, function: str, params: dict[str, str], **transport: str) -> Any:
    """Call the double as the client does: a POST form body; its parsed JSON answer."""
    form = {"wstoken": TOKEN, "wsfunction": function, "moodlewsrestformat": "json"}
    form |= transport
    response = await sandbox.client.post(URL, data={**form, **params})
    assert response.status_code == 200, response.text
    return response.json()


async def seed(sandbox: Sandbox, path: str, body: Any, status: int = 201) -> Any:
    """Seed or change the site through the control API."""
    response = await sandbox.client.request(
        "PATCH" if status == 200 else "POST", CONTROL + path, json=body
    )
    assert response.status_code == status, response.text
    return response.json()


async def biology(sandbox: Sandbox) -> dict[str, Any]:
    """The fixtures' world: course 5, its teacher and two students, a closed quiz (9, activity
    64) Ana completed and an open one (12, activity 87) she is attempting; Ben accepts
    messages from his contacts only."""
    await seed(sandbox, "", {"sitename": "Example University Moodle", "debug": True}, 200)
    await seed(sandbox, "/courses", {"id": 5, "fullname": "Introduction to Biology"} | {
        "shortname": "BIO101"})  # fmt: skip
    people = [
        {"id": 7, "firstname": "Marta", "lastname": "Garcia", "email": "m.garcia@example.edu"}
        | {"course": 5, "role": "editingteacher"},
        {"id": 31, "firstname": "Ana", "lastname": "Souza", "idnumber": "S2025-0031"}
        | {"email": "ana.souza@student.example.edu", "city": "Lisbon", "country": "PT"}
        | {"course": 5},
        {"id": 32, "firstname": "Ben", "lastname": "Okafor", "messaging": "onlycontacts"}
        | {"email": "ben.okafor@student.example.edu", "course": 5},
    ]
    await seed(sandbox, "/users", {"users": people})
    week1 = {"id": 9, "coursemodule": 64, "course": 5, "name": "Week 1 check"}
    week1 |= {"timeopen": 1765785600, "timeclose": 1766447940}
    week3 = {"id": 12, "coursemodule": 87, "course": 5, "name": "Week 3 check"}
    week3 |= {"timeopen": 1767600000, "timeclose": "2026-01-12T23:59:00+00:00"}
    await seed(sandbox, "/quizzes", {"quizzes": [week1, week3]})
    await seed(sandbox, "/quizzes/9/complete", {"userid": 31, "state": 1})
    await seed(sandbox, "/quizzes/12/attempts", {"userid": 31})
    return sandbox_state(sandbox.app).moodle[SITE]


@pytest.fixture
async def site(make_sandbox: SandboxFactory) -> Any:
    """A sandbox whose Berlin site holds the fixtures' world, its clock at ``START``."""
    async with make_sandbox(start=START) as built:
        await biology(built)
        yield built


FUNCTION_FIXTURES = [
    "core_webservice_get_site_info",
    "core_enrol_get_enrolled_users",
    "mod_quiz_get_quizzes_by_courses",
    "core_completion_get_activities_completion_status",
    "mod_quiz_get_user_quiz_attempts",
    "core_message_send_instant_messages",
    "core_message_get_messages",
]


@pytest.mark.parametrize("function", FUNCTION_FIXTURES)
async def test_the_fixtures_request_gets_an_answer_of_the_fixtures_shape(
    site: Sandbox, function: str
) -> None:
    sample = fixture(function)
    params = dict(sample["request"]["params"])
    if function == "core_message_get_messages":  # Ana's message from the token's user, first
        sent = fixture("core_message_send_instant_messages")["request"]["params"]
        await call(site, "core_message_send_instant_messages", sent)
        params["useridfrom"] = str(sandbox_state(site.app).moodle[SITE]["userid"])
    answer = await call(site, function, params)
    conforms(answer, [sample["response"]])
    assert answer  # not an empty shape: records to compare
    if isinstance(answer, dict) and function != "core_webservice_get_site_info":
        assert next(iter(answer.values())), answer


def test_the_double_serves_the_functions_the_fixtures_and_the_client_name() -> None:
    # The course functions' shapes are checked in integrations/test_moodle_course.py.
    assert list(FUNCTIONS) == FUNCTION_FIXTURES
    served = FUNCTION_FIXTURES + list(COURSE_FUNCTIONS) + list(USER_FUNCTIONS)
    assert list(SERVED_FUNCTIONS) == list(SERVED) == served
    assert set(CLIENT_FUNCTIONS) == set(SERVED)


async def test_answers_carry_the_fixtures_values(site: Sandbox) -> None:
    users = await call(site, "core_enrol_get_enrolled_users", {"courseid": "5"})
    assert [u["id"] for u in users] == [3, 7, 31, 32]  # the token's user, a teacher too
    assert [u["roles"][0]["shortname"] for u in users] == [
        "teacher",
        "editingteacher",
        "student",
        "student",
    ]
    quizzes = await call(site, "mod_quiz_get_quizzes_by_courses", {"courseids[0]": "5"})
    assert [(q["id"], q["coursemodule"], q["timeclose"]) for q in quizzes["quizzes"]] == [
        (9, 64, 1766447940),
        (12, 87, 1768262340),
    ]
    assert "navmethod" not in quizzes["quizzes"][0]  # closed: no fields of an open quiz
    assert quizzes["quizzes"][1]["navmethod"] == "free"
    done = await call(
        site, "core_completion_get_activities_completion_status", {"courseid": "5", "userid": "31"}
    )
    assert [(s["cmid"], s["state"]) for s in done["statuses"]] == [(64, 1), (87, 0)]
    sent = await call(
        site,
        "core_message_send_instant_messages",
        fixture("core_message_send_instant_messages")["request"]["params"],
    )
    expected = fixture("core_message_send_instant_messages")["response"]
    assert [s["msgid"] > 0 for s in sent] == [True, False]
    assert sent[0]["clientmsgid"] == expected[0]["clientmsgid"]
    assert {k: sent[1][k] for k in ("msgid", "errormessage", "cantsendtouser")} == {
        k: expected[1][k] for k in ("msgid", "errormessage", "cantsendtouser")
    }


async def test_json_is_phps_with_escaped_slashes_and_unicode(site: Sandbox) -> None:
    await seed(site, "/users", {"firstname": "Jürgen", "lastname": "Groß", "email": None} | {
        "course": 5})  # fmt: skip
    form = {"wstoken": TOKEN, "wsfunction": "core_enrol_get_enrolled_users", "courseid": "5"}
    response = await site.client.post(URL, data=form | {"moodlewsrestformat": "json"})
    assert response.headers["content-type"] == "application/json"
    assert b"J\\u00fcrgen Gro\\u00df" in response.content
    assert b"http:\\/\\/sandbox\\/moodle\\/academy-berlin" in response.content
    jurgen = response.json()[-1]
    assert jurgen["fullname"] == "Jürgen Groß"
    assert "email" not in jurgen  # none to show: left out, as Moodle leaves it out
    del form["courseid"]
    response = await site.client.post(URL, data=form)  # no moodlewsrestformat: XML
    assert response.headers["content-type"].startswith("application/xml")
    assert "<ERRORCODE>invalidparameter</ERRORCODE>" in response.text  # courseid is missing


@pytest.mark.parametrize(
    ("case", "function", "params", "token"),
    [
        ("invalid_token", "core_enrol_get_enrolled_users", {"courseid": "5"}, "0" * 28 + "dead"),
        ("unknown_function", "mod_quiz_get_quizes_by_courses", {"courseids[0]": "5"}, TOKEN),
        (
            "missing_parameter",
            "core_completion_get_activities_completion_status",
            {"courseid": "5"},
            TOKEN,
        ),
        (
            "unexpected_parameter",
            "mod_quiz_get_quizzes_by_courses",
            {"courseids[0]": "5", "courseid": "5"},
            TOKEN,
        ),
        (
            "function_not_in_service_with_debugging",
            "core_user_get_user_preferences",
            {"userid": "31"},
            TOKEN,
        ),
        (
            "unsupported_search_field_with_debugging",
            "core_user_get_users_by_field",
            {"field": "lang", "values[0]": "de"},
            TOKEN,
        ),
    ],
)
async def test_errors_are_moodles_own_bodies_with_http_200(
    site: Sandbox, case: str, function: str, params: dict[str, str], token: str
) -> None:
    expected = error_case(case)
    assert expected["request"]["wsfunction"] == function
    form = {"wstoken": token, "wsfunction": function, "moodlewsrestformat": "json"}
    response = await site.client.post(URL, data=form | params)
    assert response.status_code == 200
    assert response.json() == expected["response"]


async def test_users_by_field_answer_the_fixtures_shape_with_language_and_zone(
    site: Sandbox,
) -> None:
    sample = fixture("core_user_get_users_by_field")
    await seed(site, "/users", {"id": 40, "firstname": "Uwe", "lastname": "Brandt"} | {
        "email": None, "lang": "de_du", "timezone": "99", "course": 5})  # fmt: skip
    answer = await call(site, "core_user_get_users_by_field", sample["request"]["params"])
    conforms(answer, [sample["response"]])
    assert [(u["id"], u["lang"], u["timezone"]) for u in answer] == [
        (31, "en", "UTC"),  # the site's, as a user made without them gets them
        (32, "en", "UTC"),
    ]  # 99 is no user: left out
    assert answer[0]["idnumber"] == "S2025-0031"
    params = {"field": "id", "values[0]": "40", "values[1]": "31", "values[2]": "40"}
    ana, uwe = await call(site, "core_user_get_users_by_field", params)  # by id, once each
    shown = {k: uwe.get(k) for k in ("id", "lang", "timezone", "email")}
    assert shown == {"id": 40, "lang": "de_du", "timezone": "99", "email": None}
    assert ana["id"] == 31
    by_email = {"field": "email", "values[0]": "ben.okafor@student.example.edu"}
    assert [u["id"] for u in await call(site, "core_user_get_users_by_field", by_email)] == [32]


async def test_users_by_field_refuse_as_moodle_does(site: Sandbox) -> None:
    def asked(field: str, *values: str) -> dict[str, str]:
        return {"field": field} | {f"values[{i}]": v for i, v in enumerate(values)}

    not_a_word = await call(site, "core_user_get_users_by_field", asked("user_id", "31"))
    assert not_a_word["errorcode"] == "invalidparameter"  # PARAM_ALPHA
    assert not_a_word["debuginfo"].startswith("field => Invalid parameter value detected")
    unknown = await call(site, "core_user_get_users_by_field", asked("lang", "de"))
    assert (unknown["errorcode"], unknown["exception"]) == (
        "codingerror",
        "core\\exception\\coding_exception",
    )
    for value, cleaned in (("abc", 0), ("31x", 31)):
        wrong = await call(site, "core_user_get_users_by_field", asked("id", "32", value))
        assert wrong["errorcode"] == "invalidparameter"
        assert (
            wrong["debuginfo"]
            == f"The field 'id' value is invalid: {value}(cleaned value: {cleaned})"
        )
    without = await call(site, "core_user_get_users_by_field", asked("id"))
    assert without["debuginfo"] == "Missing required key in single structure: values"
    assert await call(site, "core_user_get_users_by_field", asked("id", "999")) == []


async def test_without_userdetails_users_come_without_language_zone_or_strangers(
    site: Sandbox,
) -> None:
    await seed(site, "/users", {"id": 50, "firstname": "Ida", "lastname": "Roth"} | {
        "email": "ida@example.com", "lang": "de"})  # fmt: skip  # in no course
    asked = {"field": "id", "values[0]": "3", "values[1]": "31", "values[2]": "50"}
    seen = await call(site, "core_user_get_users_by_field", asked)
    assert [(u["id"], u["lang"]) for u in seen] == [(3, "en"), (31, "en"), (50, "de")]
    await seed(site, "", {"userdetails": False}, 200)
    token_user, ana = await call(site, "core_user_get_users_by_field", asked)  # not Ida
    assert (token_user["id"], token_user["lang"]) == (3, "en")  # its own details: all of them
    assert ana["id"] == 31
    assert not {"lang", "timezone", "username", "idnumber", "auth"} & set(ana)
    assert ana["email"] == "ana.souza@student.example.edu"
    by_username = {"field": "username", "values[0]": "ana.souza"}
    assert await call(site, "core_user_get_users_by_field", by_username) == []  # not seen
    flag = await site.client.patch(CONTROL, json={"userdetails": "no"})
    assert flag.status_code == 400


async def test_a_function_taken_out_of_the_service_is_an_access_exception(site: Sandbox) -> None:
    served = [f for f in SERVED if f != "core_message_get_messages"]
    await seed(site, "", {"service": served, "debug": False}, 200)
    answer = await call(site, "core_message_get_messages", {"useridto": "31"})
    expected = error_case("function_not_in_service")["response"]
    assert answer == expected  # without debuginfo: the site does not debug
    info = await call(site, "core_webservice_get_site_info", {})
    assert [f["name"] for f in info["functions"]] == served


@pytest.mark.parametrize(
    ("params", "debuginfo"),
    [
        ({"courseid": "abc"}, "courseid => Invalid parameter value detected: Invalid external"),
        ({"courseid": "05"}, "courseid => Invalid parameter value detected"),
        ({"courseid": "5", "options": "x"}, "options => Invalid parameter value detected: Only"),
        ({"courseid": "5", "options[0][name]": "onlyactive"}, "Missing required key in single"),
    ],
)
async def test_parameters_are_checked_as_moodle_declares_them(
    site: Sandbox, params: dict[str, str], debuginfo: str
) -> None:
    answer = await call(site, "core_enrol_get_enrolled_users", params)
    assert answer["errorcode"] == "invalidparameter"
    assert answer["debuginfo"].startswith(debuginfo) or debuginfo in answer["debuginfo"]


async def test_booleans_are_only_1_or_0_and_the_body_wins_over_the_query(site: Sandbox) -> None:
    params = {"quizid": "12", "userid": "31", "status": "all", "includepreviews": "true"}
    answer = await call(site, "mod_quiz_get_user_quiz_attempts", params)
    assert answer["errorcode"] == "invalidparameter"
    query = {"wsfunction": "core_webservice_get_site_info", "wstoken": "wrong"}
    form = {"wstoken": TOKEN, "moodlewsrestformat": "json"}
    response = await site.client.post(URL, params=query, data=form)
    assert response.json()["userid"] == 3  # the query's function, the body's token


async def test_refusals_and_a_site_without_messaging(site: Sandbox) -> None:
    messages = {"messages[0][touserid]": "999", "messages[0][text]": "Hallo"}
    messages |= {"messages[1][touserid]": "31", "messages[1][text]": "x" * 4097}
    sent = await call(site, "core_message_send_instant_messages", messages)
    assert [s["msgid"] for s in sent] == [-1, -1]
    assert "(999) that doesn't exist" in sent[0]["errormessage"]
    assert sent[1]["errormessage"] == "The message is longer than the maximum allowed."
    await seed(site, "", {"messaging": False}, 200)
    answer = await call(site, "core_message_send_instant_messages", messages)
    assert answer["errorcode"] == "disabled"


async def test_messages_are_read_back_only_as_moodle_allows(site: Sandbox) -> None:
    send = {"messages[0][touserid]": "31", "messages[0][text]": "Ref qr-1"}
    [sent] = await call(site, "core_message_send_instant_messages", send)
    ask = {"useridto": "31", "useridfrom": "3", "type": "conversations"}
    assert (await call(site, "core_message_get_messages", ask))["messages"] == []  # read=1
    both = await call(site, "core_message_get_messages", ask | {"read": "2"})
    assert [m["id"] for m in both["messages"]] == [sent["msgid"]]
    denied = await call(site, "core_message_get_messages", ask | {"useridfrom": "0"})
    assert denied["errorcode"] == "accessdenied"  # no moodle/site:readallmessages
    read = await site.client.post(f"{CONTROL}/messages/{sent['msgid']}/read")
    assert read.json()["timeread"] is not None
    assert len((await call(site, "core_message_get_messages", ask))["messages"]) == 1
    listed = await site.client.get(f"{CONTROL}/messages")
    assert [m["clientmsgid"] for m in listed.json()["messages"]] == [None]


async def test_a_path_no_site_serves_is_the_web_servers_404(sandbox: Sandbox) -> None:
    response = await sandbox.client.post("/moodle/no-such-site/webservice/rest/server.php")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")


async def test_moodle_faults_are_http_errors_of_its_web_server(site: Sandbox) -> None:
    await site.fault(
        vendor="moodle", kind="outage", seconds=30, function="core_message_get_messages"
    )
    form = {"useridto": "31", "useridfrom": "3"}
    outage = await site.client.post(
        URL, data={"wstoken": TOKEN, "wsfunction": "core_message_get_messages"} | form
    )
    assert outage.status_code == 503
    assert outage.headers["content-type"].startswith("text/html")
    assert (await call(site, "core_webservice_get_site_info", {}))["userid"] == 3  # not hit
    await site.client.delete("/_sandbox/faults")
    await site.fault(vendor="moodle", kind="malformed", count=1)
    broken = await site.client.post(URL, data={"wstoken": TOKEN, "moodlewsrestformat": "json"})
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken.content)
    stats = (await site.client.get("/_sandbox/stats")).json()["requests"]["moodle"]
    assert stats["503"] == 1
    assert stats["200"] >= 2
    for spec in (
        {"vendor": "moodle", "kind": "rate_limit"},  # Moodle has no rate limiting
        {"vendor": "moodle", "kind": "error", "status": 400},
        {"vendor": "clickup", "kind": "error", "function": "x"},
    ):
        assert (await site.client.post("/_sandbox/faults", json=spec)).status_code == 422


async def test_apply_then_error_sends_the_message_and_answers_500(site: Sandbox) -> None:
    await site.fault(vendor="moodle", kind="apply_then_error", count=1)
    form = {"wstoken": TOKEN, "wsfunction": "core_message_send_instant_messages"}
    form |= {"messages[0][touserid]": "31", "messages[0][text]": "Ref qr-2"}
    response = await site.client.post(URL, data=form)
    assert response.status_code == 500
    assert sandbox_state(site.app).moodle[SITE]["messages"][-1]["fullmessage"] == "Ref qr-2"


async def test_the_control_api_seeds_and_changes_a_site(sandbox: Sandbox) -> None:
    assert (await sandbox.client.get("/_sandbox/moodle/nowhere")).status_code == 404
    sites = (await sandbox.client.get("/_sandbox/moodle")).json()["sites"]
    assert [s["site"] for s in sites] == ["academy-berlin", "academy-newyork"]
    course = (await seed(sandbox, "/courses", {"fullname": "Statistik"}))["courses"][0]
    user = {"firstname": "Ida", "lastname": "Roth", "email": "ida@example.com"}
    [ida] = (await seed(sandbox, "/users", user))["users"]
    await seed(sandbox, "/enrolments", {"userid": ida["id"], "courseid": course["id"]})
    quiz = {"course": course["id"], "name": "Quiz 1", "timeclose": "2026-03-02T22:59:00Z"}
    [made] = (await seed(sandbox, "/quizzes", quiz))["quizzes"]
    assert made["timeclose"] == 1772492340
    moved = await seed(sandbox, f"/quizzes/{made['id']}", {"timeclose": None}, 200)
    assert moved["timeclose"] == 0
    done = await seed(sandbox, f"/quizzes/{made['id']}/complete", {"userid": ida["id"]})
    assert done["completion"]["state"] == 2
    assert done["attempt"]["state"] == "finished"
    world = (await sandbox.client.get(CONTROL)).json()
    assert [e["role"] for e in world["enrolments"]] == ["teacher", "student"]
    for path, body in (
        ("/quizzes", {"course": 999, "name": "x"}),
        ("/users", {"firstname": "A", "lastname": "B", "messaging": "nobody"}),
        ("/courses", {"id": course["id"], "fullname": "again"}),
    ):
        response = await sandbox.client.post(CONTROL + path, json=body)
        assert response.status_code in (400, 409), response.text
    flags = await sandbox.client.patch(CONTROL, json={"maintenance": "yes"})
    assert flags.status_code == 400


async def test_maintenance_mode_is_moodles_sitemaintenance(site: Sandbox) -> None:
    await seed(site, "", {"maintenance": True}, 200)
    answer = await call(site, "core_webservice_get_site_info", {})
    assert answer["errorcode"] == "sitemaintenance"


async def test_a_demo_reset_seeds_both_sites_beside_the_deals(make_sandbox: SandboxFactory) -> None:
    async with make_sandbox(start=START) as sandbox:
        reset = await sandbox.client.post("/_sandbox/reset", json={"demo": True, "seed": 3})
        assert reset.json() == {"ok": True, "deals": 48}  # the deals' demo as it was
        worlds = sandbox_state(sandbox.app).moodle
        now = START.timestamp()
        for name, token in (
            ("academy-berlin", "sandbox-moodle-berlin-token"),
            ("academy-newyork", "sandbox-moodle-newyork-token"),
        ):
            world = worlds[name]
            learners = [e for e in world["enrolments"] if e["role"] == "student"]
            assert 5 <= len(learners) <= 8
            assert 2 <= len(world["quizzes"]) <= 3
            assert all(now < q["timeclose"] <= now + 14 * 86400 for q in world["quizzes"])
            assert world["completions"], name
            emails = [u["email"] for u in world["users"]]
            assert all(e.endswith(("@example.com", ".example")) for e in emails)
            form = {"wstoken": token, "wsfunction": "core_webservice_get_site_info"}
            response = await sandbox.client.post(
                f"/moodle/{name}/webservice/rest/server.php",
                data=form | {"moodlewsrestformat": "json"},
            )
            assert response.json()["lang"] == ("de" if name == "academy-berlin" else "en")
        first = json.loads(json.dumps(worlds))
        await sandbox.client.post("/_sandbox/reset", json={"demo": True, "seed": 3})
        assert json.loads(json.dumps(worlds)) == first  # the same seed, the same sites
        await sandbox.client.post("/_sandbox/reset", json={})
        assert worlds == {}


def test_the_sites_are_kept_across_a_restart(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    state = sandbox_state(create_app(SandboxConfig(state_file=state_file, start=START)))
    load_demo(state)
    learner = state.moodle[SITE]["enrolments"][-1]["userid"]
    params = {"messages": [{"touserid": learner, "text": "Ref qr-kept", "textformat": 2}]}
    call = moodle_functions.Call(state, state.moodle[SITE], "http://x")
    moodle_functions.send_messages(call, params)
    persist.save(state, state_file)
    os.close(state.lock_fd or -1)
    second = sandbox_state(create_app(SandboxConfig(state_file=state_file)))
    assert second.moodle == json.loads(json.dumps(state.moodle))
    assert second.moodle[SITE]["messages"][0]["fullmessage"] == "Ref qr-kept"
