"""The answers of the web-service functions the Moodle double serves (``sandbox/moodle.py`` reads
the request, checks the token and the parameters), each as its return declaration says, keys in
declared order: the shapes of ``followup_pipeline_tests/fixtures/moodle``. A function reads and
changes the site's world (``moodle_demo.py``) and raises ``MoodleException`` as Moodle does.
"""

import hashlib
import html
import json
from typing import Any

from followup_pipeline.sandbox.moodle_call import (
    Call,
    Function,
    MoodleException,
    fields,
    invalid,
)
from followup_pipeline.sandbox.moodle_demo import ROLES, SERVED, find, full_name
from followup_pipeline.sandbox.state import Record

#: Moodle's limit of an instant message's text, in bytes (``strlen``).
MESSAGE_MAX_LENGTH = 4096
REFUSED_PRIVACY = (
    "You can't message this user due to their message preferences. Try adding them as a contact."
)


def site_info(call: Call, params: Record) -> Any:
    """``core_webservice_get_site_info``: the site, the token's user, the service's functions."""
    world, me = call.world, call.me
    names = "usecomments usetags enablenotes messaging enableblogs enablecompletion enablebadges"
    names += " messagingallusers enablecustomreports enableglobalsearch mnet_dispatcher_mode"
    off = ("messagingallusers", "enablecustomreports", "enableglobalsearch", "mnet_dispatcher_mode")
    features = [{"name": f, "value": int(f not in off)} for f in names.split()]
    features[3]["value"] = int(world["messaging"])
    features.append({"name": "enablecompetencies", "value": 0})
    key = hashlib.sha1(f"{world['name']}:{me['id']}".encode(), usedforsecurity=False).hexdigest()
    functions = [{"name": f, "version": world["version"]} for f in world["service"]]
    return fields(
        "sitename username firstname lastname fullname lang userid siteurl userpictureurl "
        "functions downloadfiles uploadfiles release version mobilecssurl advancedfeatures "
        "usercanmanageownfiles userquota usermaxuploadfilesize userhomepage "
        "userprivateaccesskey siteid sitecalendartype usercalendartype userissiteadmin theme "
        "limitconcurrentlogins policyagreed usercanchangeconfig usercanviewconfig",
        *(world["sitename"], me["username"], me["firstname"], me["lastname"], full_name(me)),
        *(world["lang"], me["id"], call.url, call.picture("f1"), functions, 0, 0),
        *(world["release"], world["version"], "", features, True, 0, -1, 1, key, 1),
        *("gregorian", "gregorian", False, "boost", 0, 0, False, False),
    )


def enrolled_users(call: Call, params: Record) -> Any:
    """``core_enrol_get_enrolled_users``: the course's participants, filtered, sorted, paged."""
    course = call.one("courses", params["courseid"], "course")
    options = {o["name"]: o["value"] for o in params["options"]}
    active = options.get("onlyactive", "") not in ("", "0")
    suspended = options.get("onlysuspended", "") not in ("", "0")
    if active and suspended:
        raise MoodleException(
            "codingerror",
            "Coding error detected, it must be fixed by a programmer: Both onlyactive and "
            "onlysuspended are set, this is probably not what you want!",
            "coding_exception",
        )
    sort = options.get("sortby", "id")
    if sort not in ("id", "firstname", "lastname", "siteorder"):
        raise invalid(
            f"Invalid value for sortby parameter (value: {sort}), allowed values are: "
            "id,firstname,lastname,siteorder"
        )
    direction = options.get("sortdirection", "ASC").upper()
    if direction not in ("ASC", "DESC"):
        raise invalid(
            f"Invalid value for sortdirection parameter (value: {direction}),allowed values "
            "are: ASC,DESC"
        )
    rows = [e for e in call.world["enrolments"] if e["courseid"] == course["id"]]
    rows = [e for e in rows if e["active"] or not active]
    rows = [e for e in rows if not (suspended and e["active"])]
    by = "lastname" if sort == "siteorder" else sort
    rows.sort(key=lambda e: (call.one("users", e["userid"], "user")[by], e["userid"]))
    if direction == "DESC":
        rows.reverse()
    first, count = int(options.get("limitfrom") or 0), int(options.get("limitnumber") or 0)
    rows = rows[first : first + count] if count else rows[first:]
    wanted = {f for f in options.get("userfields", "").split(",") if f}
    return [participant(call, e, wanted) for e in rows]


def participant(call: Call, enrolment: Record, wanted: set[str]) -> Record:
    """One participant as declared; a field the user has no value for (an ``email`` the
    token's user may not see) is left out, and so is one not in ``userfields`` when given."""
    user = call.one("users", enrolment["userid"], "user")
    role = enrolment["role"]
    roles = [fields("roleid name shortname sortorder", ROLES[role], "", role, 0)]
    courses = [
        fields("id fullname shortname", c["id"], c["fullname"], c["shortname"])
        for c in call.world["courses"]
        if c["id"] in call.enrolled(user["id"])
    ]
    record = fields(
        "id username firstname lastname initials fullname email idnumber firstaccess "
        "lastaccess lastcourseaccess city country profileimageurlsmall profileimageurl roles "
        "enrolledcourses",
        *(user["id"], user["username"], user["firstname"], user["lastname"]),
        *(user["firstname"][:1] + user["lastname"][:1], full_name(user), user.get("email")),
        *(user.get("idnumber"), 0, 0, 0, user.get("city"), user.get("country")),
        *(call.picture("f2"), call.picture("f1"), roles, courses),
    )
    keep = (wanted | {"id", "fullname"}) if wanted else set(record)
    return {k: v for k, v in record.items() if v is not None and k in keep}


#: A quiz's fields after ``name``, in declared order, with the values the double gives
#: (``timeopen`` and ``timeclose`` are the quiz's); those marked ``*`` come only while the quiz
#: is open to the token's user.
QUIZ_FIELDS = [
    (key.strip("*"), value, key.endswith("*"))
    for key, value in fields(
        "intro introformat introfiles section visible groupmode groupingid lang enableaitools "
        "enabledaiactions timeopen timeclose timelimit overduehandling* graceperiod* "
        "preferredbehaviour canredoquestions* attempts attemptonlast* grademethod decimalpoints "
        "questiondecimalpoints reviewattempt* reviewcorrectness* reviewmaxmarks* reviewmarks* "
        "reviewspecificfeedback* reviewgeneralfeedback* reviewrightanswer* "
        "reviewoverallfeedback* questionsperpage* navmethod* sumgrades grade browsersecurity* "
        "delay1* delay2* showuserpicture* showblocks* completionattemptsexhausted* "
        "completionpass* allowofflineattempts* autosaveperiod* hasfeedback hasquestions*",
        *("<p>Covers this week's chapters.</p>", 1, [], 1, True, 0, 0, "", None, None, 0, 0),
        *(1800, "autosubmit", 0, "deferredfeedback", 0, 2, 0, 1, 2, -1, 69904, 4368, 69904),
        *(4368, 4368, 4368, 4368, 4368, 2, "free", 10.0, 10.0, "-", 0, 0, 0, 0, 0, 0, 0, 60),
        *(0, 1),
    ).items()
]


def quizzes(call: Call, params: Record) -> Any:
    """``mod_quiz_get_quizzes_by_courses``: a course the token's user cannot reach is a
    warning; none asked for: every course it is enrolled in."""
    mine = call.enrolled(call.me["id"])
    asked = params["courseids"] or mine
    message = "No access rights in course context"
    warnings = [
        fields("item itemid warningcode message", "course", c, "1", message)
        for c in asked
        if c not in mine
    ]
    found = []
    for quiz in sorted(call.world["quizzes"], key=lambda q: (q["course"], q["id"])):
        if quiz["course"] not in asked or quiz["course"] not in mine:
            continue
        closes = quiz["timeclose"] or call.now
        opened = quiz["timeopen"] <= call.now <= closes
        record = {k: quiz[k] for k in ("id", "coursemodule", "course", "name")}
        for key, value, only_open in QUIZ_FIELDS:
            if opened or not only_open:
                record[key] = quiz.get(key, value)
        found.append(record)
    return {"quizzes": found, "warnings": warnings}


def completion(call: Call, params: Record) -> Any:
    """``core_completion_get_activities_completion_status``: each quiz of the course (their
    completion automatic, on receiving a grade) for one user."""
    course = call.one("courses", params["courseid"], "course")
    user = call.one("users", params["userid"], "user")
    tracked = course["id"] in call.enrolled(user["id"])
    statuses = []
    # The user's completions read once (not once a quiz: a large academy has many of them).
    mine = {c["cmid"]: c for c in call.world["completions"] if c["userid"] == user["id"]}
    for quiz in sorted(call.world["quizzes"], key=lambda q: q["coursemodule"]):
        if quiz["course"] != course["id"]:
            continue
        done = mine.get(quiz["coursemodule"])
        state, at = (done["state"], done["timecompleted"]) if done else (0, 0)
        rule = {"status": int(state > 0), "description": "Receive a grade"}
        statuses.append(
            fields(
                "cmid modname instance state timecompleted tracking overrideby valueused "
                "hascompletion isautomatic istrackeduser uservisible details isoverallcomplete",
                *(quiz["coursemodule"], "quiz", quiz["id"], state, at, 2, None, False, True),
                *(True, tracked, True, [{"rulename": "completionusegrade", "rulevalue": rule}]),
                state in (1, 2),
            )
        )
    return {"statuses": statuses, "warnings": []}


#: The attempt states each ``status`` of ``mod_quiz_get_user_quiz_attempts`` selects.
ATTEMPT_STATES = {
    "all": ("notstarted", "inprogress", "overdue", "submitted", "finished", "abandoned"),
    "finished": ("finished", "abandoned", "submitted"),
    "unfinished": ("inprogress", "overdue"),
}


def quiz_attempts(call: Call, params: Record) -> Any:
    """``mod_quiz_get_user_quiz_attempts``: a user's attempts at a quiz, by ``status``."""
    quiz = call.one("quizzes", params["quizid"], "quiz")
    if params["status"] not in ATTEMPT_STATES:
        raise invalid("Invalid status value")
    user = call.one("users", params["userid"] or call.me["id"], "user")
    states = ATTEMPT_STATES[params["status"]]
    attempts = [
        fields(
            "id quiz userid attempt uniqueid layout currentpage preview state timestart "
            "timefinish timemodified timemodifiedoffline timecheckstate sumgrades "
            "gradednotificationsenttime",
            *(a["id"], quiz["id"], user["id"], a["attempt"], 20000 + a["id"], "1,2,0,3,0", 0),
            *(0, a["state"], a["timestart"], a["timefinish"], a["timefinish"] or a["timestart"]),
            *(0, a["timestart"] + 1800 if a["state"] == "inprogress" else None),
            *(a["sumgrades"], None),
        )
        for a in call.world["attempts"]
        if a["quiz"] == quiz["id"] and a["userid"] == user["id"] and a["state"] in states
    ]
    return {"attempts": attempts, "warnings": []}


def formatted(text: str, textformat: int) -> str:
    """``message_format_message_text``: the text as Moodle shows it (plain text escaped)."""
    if textformat == 1:
        return text
    escaped = html.escape(text).replace("&#x27;", "&#039;").replace("\n", "<br />\n")
    return f'<div class="text_to_html">{escaped}</div>' if textformat == 0 else escaped


def refusal(call: Call, to: Record | None, message: Record) -> tuple[str, str]:
    """Why a message cannot go (its ``errormessage``, and ``cantsendtouser``), or ``("", "")``."""
    if to is None:
        number = message["touserid"]
        return f"You cannot send a message to a user ID ({number}) that doesn't exist.", ""
    if len(message["text"].encode()) > MESSAGE_MAX_LENGTH:
        return "The message is longer than the maximum allowed.", ""
    shared = set(call.enrolled(to["id"])) & set(call.enrolled(call.me["id"]))
    blocked = to["messaging"] == "onlycontacts" or (
        to["messaging"] == "coursemember" and not shared
    )
    if blocked and not call.world["readallmessages"]:
        return REFUSED_PRIVACY, full_name(to)
    return "", ""


def send_messages(call: Call, params: Record) -> Any:
    """``core_message_send_instant_messages``: each message sent from the token's user, or
    refused with ``msgid`` -1 (no such user, too long, the recipient's privacy)."""
    world, me = call.world, call.me
    if not world["messaging"]:
        raise MoodleException("disabled", "Messaging is disabled on this site")
    results = []
    for message in params["messages"]:
        echo = {"clientmsgid": message["clientmsgid"]} if "clientmsgid" in message else {}
        to = find(world, "users", id=message["touserid"])
        error, person = refusal(call, to, message)
        if error or to is None:
            results.append(
                {"msgid": -1, **echo, "errormessage": error, "cantsendtouser": person}
                | {"candeletemessagesforallusers": False}
            )
            continue
        if message["textformat"] not in (0, 1, 2, 4):
            number = str(message["textformat"])
            raise MoodleException("invalidtextformat", "Invalid text format", debuginfo=number)
        sent = store(call, me, to, message)
        results.append(
            {"msgid": sent["id"], **echo, "text": sent["text"], "timecreated": call.now}
            | {"conversationid": sent["conversationid"], "useridfrom": me["id"]}
            | {"candeletemessagesforallusers": False}
        )
    return results


def store(call: Call, me: Record, to: Record, message: Record) -> Record:
    """The message kept in its (individual) conversation, made on the first message."""
    world = call.world
    pair = sorted((me["id"], to["id"]))
    conversation = find(world, "conversations", members=pair)
    if conversation is None:
        conversation = {"id": 10 + len(world["conversations"]), "members": pair}
        world["conversations"].append(conversation)
    text, textformat = message["text"], message["textformat"]
    sent = fields(
        "id useridfrom useridto conversationid fullmessage fullmessageformat smallmessage text "
        "clientmsgid timecreated timeread",
        *(world["next"]["message"], me["id"], to["id"], conversation["id"], text, textformat),
        *(text, formatted(text, textformat), message.get("clientmsgid"), call.now, None),
    )
    world["next"]["message"] += 1
    world["messages"].append(sent)
    return sent


def get_messages(call: Call, params: Record) -> Any:
    """``core_message_get_messages``: the conversations' messages to ``useridto`` from
    ``useridfrom`` (0: anyone), read (1), unread (0) or both (2); the token's user must be one
    of the two unless it has ``moodle/site:readallmessages``."""
    world = call.world
    kind, to_id, from_id = params["type"], params["useridto"], params["useridfrom"]
    if kind not in ("notifications", "conversations", "both"):
        raise invalid(
            f"Invalid value for type parameter (value: {kind}),allowed values are: "
            "notifications,conversations,both"
        )
    if not world["messaging"] and kind == "conversations":
        raise MoodleException("disabled", "Messaging is disabled on this site")
    if to_id and to_id <= 0:
        raise MoodleException("invaliduser", "Invalid user")
    to = call.one("users", to_id, "user") if to_id else None
    sender = call.one("users", from_id, "user") if from_id else None
    if call.me["id"] not in (to_id, from_id) and not world["readallmessages"]:
        raise MoodleException("accessdenied", "Access denied")
    chosen = [m for m in world["messages"] if kind != "notifications"]
    chosen = [m for m in chosen if (not to_id or m["useridto"] == to_id)]
    chosen = [m for m in chosen if (not from_id or m["useridfrom"] == from_id)]
    read = params["read"]
    chosen = [m for m in chosen if read == 2 or (m["timeread"] is not None) == (read == 1)]
    chosen.sort(key=lambda m: (m["timecreated"], m["id"]), reverse=params["newestfirst"])
    first, count = params["limitfrom"], params["limitnum"]
    chosen = chosen[first : first + count] if count else chosen[first:]
    return {"messages": [shown(call, m, to, sender) for m in chosen], "warnings": []}


def shown(call: Call, message: Record, to: Record | None, sender: Record | None) -> Record:
    """One message as ``core_message_get_messages`` declares it."""
    writer = sender or call.one("users", message["useridfrom"], "user")
    reader = to or call.one("users", message["useridto"], "user")
    custom = {"notificationiconurl": call.picture("f1"), "actionbuttons": {"send": "Send"}}
    custom["placeholders"] = {"send": "Write a message..."}
    return fields(
        "id useridfrom useridto subject text fullmessage fullmessageformat fullmessagehtml "
        "smallmessage notification contexturl contexturlname timecreated timeread "
        "usertofullname userfromfullname customdata",
        *(message["id"], writer["id"], reader["id"], f"New message from {full_name(writer)}"),
        *(message["text"], message["fullmessage"], message["fullmessageformat"]),
        *(message["fullmessage"] if message["fullmessageformat"] == 1 else "",),
        *(message["smallmessage"], 0, "", "", message["timecreated"], message["timeread"]),
        *(full_name(reader), full_name(writer), json.dumps(custom, separators=(",", ":"))),
    )


_ANSWERS: tuple[Function, ...] = (site_info, enrolled_users, quizzes, completion, quiz_attempts)
_ANSWERS += (send_messages, get_messages)
#: The served functions by name (``moodle_demo.SERVED``, in its order; the course functions
#: that follow are ``moodle_course.py``'s).
FUNCTIONS: dict[str, Function] = dict(zip(SERVED[: len(_ANSWERS)], _ANSWERS, strict=True))
