"""The Moodle sites' worlds (``state.moodle``): each site seeded and changed as the control API
asks (courses, users, enrolments, quizzes, completions, attempts, a message read), and the two
demo sites a reset with ``demo`` loads.

A site exists for each token in ``SandboxConfig.moodle_tokens``; its world is plain JSON (kept by
``persist.py``) and starts empty but for the token's user, a service account enrolled as a
non-editing teacher in every course created (so it shares a course with the learners it
messages, as Moodle's default privacy asks). Times are Unix seconds of the sandbox clock.
"""

import random
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from followup_pipeline.sandbox.records import RecordError
from followup_pipeline.sandbox.state import Record, SandboxState

#: The functions the double serves (``moodle_functions.py``), all in a site's service unless
#: the control API changes it.
SERVED = (
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
#: Moodle's role ids of the standard roles.
ROLES = {"manager": 1, "editingteacher": 3, "teacher": 4, "student": 5}
#: A learner's "Accept messages from" (``message_blocknoncontacts``): contacts only, anyone in
#: their courses (Moodle's default), anyone on the site.
PRIVACY = ("onlycontacts", "coursemember", "site")
#: Flags of a site the control API may set, with their types: ``lang`` and ``timezone`` are the
#: site's and a new user's defaults; ``messaging`` off answers ``disabled``, ``maintenance``
#: ``sitemaintenance``; ``debug`` adds ``debuginfo`` to errors; ``readallmessages`` gives the
#: token's user that capability, ``userdetails`` (on by default) ``moodle/user:viewalldetails``
#: (the users' ``lang`` and ``timezone``: ``moodle_users.py``).
SITE_FLAGS: dict[str, type] = dict.fromkeys(("sitename", "lang", "timezone"), str)
SITE_FLAGS |= dict.fromkeys(("messaging", "maintenance", "debug", "readallmessages"), bool)
SITE_FLAGS["userdetails"] = bool
#: The tables of a site's world.
TABLES: tuple[str, ...] = ("users", "courses", "enrolments", "quizzes", "completions")
TABLES += ("attempts", "messages", "conversations", "modules")
#: The first id of each table (1 is the guest and the site course, 2 the admin).
FIRST_IDS = {"user": 3, "course": 2, "quiz": 1, "cm": 40, "attempt": 500, "message": 100}


def site_world(state: SandboxState, name: str) -> Record | None:
    """The world of site ``name``, made on first use; None when no token is configured for it."""
    if name not in state.config.moodle_tokens:
        return None
    if name in state.moodle:
        return state.moodle[name]
    world: Record = {"name": name, "sitename": name.replace("-", " ").title(), "lang": "en"}
    world |= {"timezone": "UTC", "release": "5.1 (Build: 20251006)", "version": "2025100600"}
    world |= dict.fromkeys(("maintenance", "debug", "readallmessages"), False)
    world |= {"messaging": True, "userdetails": True, "service": list(SERVED)}
    world["next"] = dict(FIRST_IDS)
    world |= {table: [] for table in TABLES}
    world["userid"] = _next(world, "user")
    world["users"].append(
        _user(world["userid"], "Follow-up", "Service", f"followup@{name}.example", "site")
    )
    state.moodle[name] = world
    return world


def known(state: SandboxState, name: str) -> Record:
    """The world of site ``name``, or a 404 for the control API."""
    world = site_world(state, name)
    if world is None:
        raise RecordError(
            404, f"no Moodle site {name!r} (sites: {sorted(state.config.moodle_tokens)})"
        )
    return world


def now(state: SandboxState) -> int:
    """The sandbox clock in Unix seconds."""
    return int(state.clock.now().timestamp())


def find(world: Record, table: str, **match: Any) -> Record | None:
    """The first row of ``table`` whose fields equal ``match``."""
    return next((r for r in world[table] if all(r.get(k) == v for k, v in match.items())), None)


def full_name(user: Record) -> str:
    """Moodle's ``fullname()``: first name, then last name."""
    return f"{user['firstname']} {user['lastname']}"


def _next(world: Record, table: str) -> int:
    number: int = world["next"][table]
    world["next"][table] = number + 1
    return number


def _given_id(world: Record, table: str, rows: str, body: Record, key: str = "id") -> int:
    """An id the body gives (unused), or the table's next one."""
    value = body.get(key)
    if value is None:
        while find(world, rows, **{key: world["next"][table]}):
            world["next"][table] += 1
        return _next(world, table)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RecordError(400, f"{key} must be a positive integer")
    if find(world, rows, **{key: value}) is not None:
        raise RecordError(409, f"{rows} already has {key} {value}")
    world["next"][table] = max(world["next"][table], value + 1)
    return value


def _text(body: Record, key: str, default: str | None = None) -> str:
    value = body.get(key, default)
    if not isinstance(value, str) or not value:
        raise RecordError(400, f"{key} must be a non-empty string")
    return value


def unix(value: Any) -> int:
    """A time the control API takes: Unix seconds, an ISO 8601 instant (UTC unless it says),
    or null (none: 0)."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        moment = datetime.fromisoformat(value)
        return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())
    raise RecordError(400, f"expected Unix seconds, an ISO 8601 instant or null, got {value!r}")


def _user(user_id: int, first: str, last: str, email: str | None, privacy: str) -> Record:
    return {
        "id": user_id,
        "username": f"{first}.{last}".lower().replace(" ", ""),
        "firstname": first,
        "lastname": last,
        "email": email,
        "messaging": privacy,
    }


def set_site(state: SandboxState, name: str, body: Record) -> Record:
    """Change a site's flags (``SITE_FLAGS``) and the functions of the token's service."""
    world = known(state, name)
    for key, value in body.items():
        if key == "service":
            if not isinstance(value, list) or not set(value) <= set(SERVED):
                raise RecordError(400, f"service must be a list of {list(SERVED)}")
            world["service"] = list(value)
        elif key in SITE_FLAGS and isinstance(value, SITE_FLAGS[key]):
            world[key] = value
        else:
            raise RecordError(
                400, f"cannot set {key!r} to {value!r}; settable: service, {list(SITE_FLAGS)}"
            )
    return world


def add_course(state: SandboxState, name: str, body: Record) -> Record:
    """A course (``fullname``, ``shortname``, optional ``id``); the token's user enrolled."""
    world = known(state, name)
    course = {
        "id": _given_id(world, "course", "courses", body),
        "fullname": _text(body, "fullname"),
        "shortname": _text(body, "shortname", body.get("fullname")),
    }
    world["courses"].append(course)
    world["enrolments"].append(
        {"courseid": course["id"], "userid": world["userid"], "role": "teacher", "active": True}
    )
    return course


def add_user(state: SandboxState, name: str, body: Record) -> Record:
    """A user (``firstname``, ``lastname``, ``email`` or null, optional ``id``, ``username``,
    ``lang`` and ``timezone`` (the site's by default; ``"99"``: follows the site's), ``city``,
    ``country``, ``idnumber``, ``messaging``), enrolled in ``course`` (with ``role`` and
    ``active``) when it is given."""
    world = known(state, name)
    privacy = body.get("messaging", "coursemember")
    if privacy not in PRIVACY:
        raise RecordError(400, f"messaging must be one of {list(PRIVACY)}")
    email = body.get("email")
    if email is not None and (not isinstance(email, str) or "@" not in email):
        raise RecordError(400, "email must be an address or null")
    user = _user(
        _given_id(world, "user", "users", body),
        _text(body, "firstname"),
        _text(body, "lastname"),
        email,
        privacy,
    )
    for key in ("username", "lang", "timezone", "city", "country", "idnumber"):
        if isinstance(body.get(key), str):
            user[key] = body[key]
        elif key in ("lang", "timezone"):
            user[key] = world[key]
    world["users"].append(user)
    if body.get("course") is not None:
        enrol(state, name, {**body, "userid": user["id"], "courseid": body["course"]})
    return user


def enrol(state: SandboxState, name: str, body: Record) -> Record:
    """Enrol ``userid`` in ``courseid`` as ``role`` (student), ``active`` or suspended."""
    world = known(state, name)
    user = find(world, "users", id=body.get("userid"))
    course = find(world, "courses", id=body.get("courseid"))
    role = body.get("role", "student")
    if user is None or course is None or role not in ROLES:
        raise RecordError(400, f"needs a known userid and courseid, and a role of {list(ROLES)}")
    found = find(world, "enrolments", courseid=course["id"], userid=user["id"])
    row = found or {"courseid": course["id"], "userid": user["id"]}
    row.update(role=role, active=bool(body.get("active", True)))
    if found is None:
        world["enrolments"].append(row)
    return row


def add_quiz(state: SandboxState, name: str, body: Record) -> Record:
    """A quiz of ``course`` named ``name``, closing at ``timeclose`` (and opening at
    ``timeopen``): Unix seconds, ISO 8601 or null; optional ``id`` and ``coursemodule``."""
    world = known(state, name)
    if find(world, "courses", id=body.get("course")) is None:
        raise RecordError(400, "course must be the id of a course of the site")
    quiz = {
        "id": _given_id(world, "quiz", "quizzes", body),
        "coursemodule": _given_id(world, "cm", "quizzes", body, "coursemodule"),
        "course": body["course"],
        "name": _text(body, "name"),
        "timeopen": unix(body.get("timeopen")),
        "timeclose": unix(body.get("timeclose")),
    }
    world["quizzes"].append(quiz)
    return quiz


def quiz_of(world: Record, quiz_id: int) -> Record:
    """A quiz of the site by id, or a 404."""
    quiz = find(world, "quizzes", id=quiz_id)
    if quiz is None:
        raise RecordError(404, f"no quiz {quiz_id}")
    return quiz


def change_quiz(state: SandboxState, name: str, quiz_id: int, body: Record) -> Record:
    """Move a quiz's ``timeclose`` or ``timeopen``, or rename it."""
    quiz = quiz_of(known(state, name), quiz_id)
    for key in ("timeopen", "timeclose"):
        if key in body:
            quiz[key] = unix(body[key])
    if "name" in body:
        quiz["name"] = _text(body, "name")
    return quiz


def attempt(state: SandboxState, name: str, quiz_id: int, body: Record) -> Record:
    """An attempt of ``userid`` at the quiz: ``inprogress`` unless ``state`` says otherwise
    (a finished one is stamped now)."""
    world = known(state, name)
    quiz = quiz_of(world, quiz_id)
    user = find(world, "users", id=body.get("userid"))
    if user is None:
        raise RecordError(400, "userid must be a user of the site")
    made = now(state)
    status = body.get("state", "inprogress")
    done = status in ("finished", "submitted", "abandoned")
    mine = [a for a in world["attempts"] if a["quiz"] == quiz["id"] and a["userid"] == user["id"]]
    row = {
        "id": _next(world, "attempt"),
        "quiz": quiz["id"],
        "userid": user["id"],
        "attempt": len(mine) + 1,
        "state": status,
        "timestart": made - 900 if done else made,
        "timefinish": made if done else 0,
        "sumgrades": body.get("sumgrades", 8.0 if done else None),
    }
    world["attempts"].append(row)
    return row


def complete_quiz(state: SandboxState, name: str, quiz_id: int, body: Record) -> Record:
    """``userid`` finishes the quiz: a finished attempt, and the quiz's completion with
    ``state`` (1 complete, 2 passed (the default), 3 failed)."""
    world = known(state, name)
    done = body.get("state", 2)
    if done not in (1, 2, 3):
        raise RecordError(400, "state must be 1 (complete), 2 (passed) or 3 (failed)")
    made = attempt(state, name, quiz_id, {**body, "state": "finished"})
    cmid = quiz_of(world, quiz_id)["coursemodule"]
    row = find(world, "completions", userid=made["userid"], cmid=cmid)
    if row is None:
        row = {"userid": made["userid"], "cmid": cmid}
        world["completions"].append(row)
    row.update(state=done, timecompleted=made["timefinish"])
    return {"completion": row, "attempt": made}


def read_message(state: SandboxState, name: str, message_id: int) -> Record:
    """The learner reads a message (it is stamped read now)."""
    message = find(known(state, name), "messages", id=message_id)
    if message is None:
        raise RecordError(404, f"no message {message_id}")
    message["timeread"] = message["timeread"] or now(state)
    return message


# --- the demo's two sites --------------------------------------------------------------------

#: The demo's sites: name, site name, language, time zone, course (full and short name), its
#: teacher, its learners ("first last address [lang [timezone]]", comma-separated; the site's
#: language and time zone unless given, "99" following the site's), its quizzes (name and the
#: days until it closes, at 23:59 local time).
DEMO_SITES = [
    (
        *("academy-berlin", "Akademie Berlin", "de", "Europe/Berlin"),
        ("Projektmanagement Grundlagen", "PM-101"),
        "Katrin Hoffmann k.hoffmann@akademie-berlin.example",
        "Lena Fischer lena.fischer@example.com, Jonas Weber jonas.weber@example.com en 99, "
        "Mia Schäfer mia.schaefer@akademie-berlin.example de_du, "
        "Lukas Becker lukas.becker@example.com, "
        "Emma Wagner emma.wagner@akademie-berlin.example, Felix Krüger felix.krueger@example.com, "
        "Hannah Schulz hannah.schulz@example.com",
        [("Woche 1: Grundbegriffe", 3), ("Woche 2: Planung", 8), ("Woche 3: Risiken", 12)],
    ),
    (
        *("academy-newyork", "New York Academy", "en", "America/New_York"),
        ("Data Literacy Essentials", "DL-101"),
        "Rachel Morgan r.morgan@ny-academy.example",
        "Olivia Johnson olivia.johnson@example.com, "
        "Ethan Williams ethan.williams@example.com en America/Chicago, "
        "Sophia Brown sophia.brown@ny-academy.example, Mason Davis mason.davis@example.com, "
        "Ava Martinez ava.martinez@ny-academy.example, Noah Wilson noah.wilson@example.com",
        [("Week 1: Reading Charts", 5), ("Week 2: Averages and Spread", 11)],
    ),
]


def _person(text: str) -> Record:
    first, last, email, *locale = text.split()
    return {"firstname": first, "lastname": last, "email": email} | dict(
        zip(("lang", "timezone"), locale, strict=False)
    )


def _closing(state: SandboxState, zone: str, days: int) -> int:
    """23:59 local time, ``days`` days after today on the sandbox clock."""
    local = state.clock.now().astimezone(ZoneInfo(zone)) + timedelta(days=days)
    return int(local.replace(hour=23, minute=59, second=0, microsecond=0).timestamp())


def load_demo(state: SandboxState, seed: int = 0) -> None:
    """Seed the demo's two sites: a course each, its teacher and learners (the last one of
    Berlin suspended; the fourth of each accepts messages from contacts only), quizzes closing
    within the next two weeks on the sandbox clock, some completed, some attempts in progress."""
    rng = random.Random(seed)
    for name, sitename, lang, zone, course_names, teacher, people, quizzes in DEMO_SITES:
        set_site(state, name, {"sitename": sitename, "lang": lang, "timezone": zone})
        fullname, shortname = course_names
        course = add_course(state, name, {"fullname": fullname, "shortname": shortname})
        add_user(state, name, _person(teacher) | {"course": course["id"], "role": "editingteacher"})
        learners = []
        listed = people.split(", ")
        for index, person in enumerate(listed):
            body = _person(person) | {"course": course["id"]}  # the site's lang, zone unless said
            body["idnumber"] = f"S{index + 1:04d}"
            body["messaging"] = "onlycontacts" if index == 3 else "coursemember"
            body["active"] = not (name == "academy-berlin" and index == len(listed) - 1)
            learners.append(add_user(state, name, body))
        opens = now(state) - 10 * 86400
        for position, (title, days) in enumerate(quizzes):
            closes = _closing(state, zone, days)
            body = {"course": course["id"], "name": title, "timeopen": opens, "timeclose": closes}
            quiz = add_quiz(state, name, body)
            for learner in learners:
                roll = rng.random()
                if roll < 0.55 - 0.2 * position:
                    complete_quiz(state, name, quiz["id"], {"userid": learner["id"]})
                elif roll < 0.7 - 0.2 * position:
                    attempt(state, name, quiz["id"], {"userid": learner["id"]})
