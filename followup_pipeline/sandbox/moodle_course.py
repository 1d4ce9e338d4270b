"""The Moodle double's course functions, for certificates and content publishing (docs/vendors.md,
Moodle): a course's completion status, a course module shown through the course format's state
actions, and a course module read back. As Moodle 5.1 declares and answers them (its
``completion/classes/external.php``, ``course/externallib.php``,
``course/format/classes/external/update_course.php``; the fixtures of
``followup_pipeline_tests/fixtures/moodle`` name the files and commits).

A course here completes by activity criteria, aggregation ALL: every quiz of the course
completed (or passed). A course without quizzes has no criteria (``nocriteriaset``); one whose
completion is off (``enablecompletion`` false) cannot be reported on (``cannotviewreport``).
Course modules of content (``modules``, a page by default) are added hidden by the control API
and shown by ``core_courseformat_update_course`` (``cm_show``); ``core_course_edit_module``, its
deprecated predecessor, is not served.
"""

import json
from typing import Any

from followup_pipeline.sandbox.moodle_call import (
    MOODLE_EXCEPTION,
    Call,
    Function,
    MoodleException,
    fields,
)
from followup_pipeline.sandbox.moodle_demo import find, known, now
from followup_pipeline.sandbox.records import RecordError
from followup_pipeline.sandbox.state import Record, SandboxState

#: The module type ids of the content a course holds (Moodle's ``modules`` table).
MODULE_TYPES = {"page": 15, "resource": 17, "url": 20, "book": 3, "quiz": 16}
#: The state actions on course modules this double carries out.
CM_ACTIONS = {"cm_show": 1, "cm_hide": 0}
DML_MISSING = "dml_missing_record_exception"


def _unknown_record() -> MoodleException:
    """An unknown course module (or course, user) as a site without debugging answers it."""
    return MoodleException(
        "invalidrecordunknown", "Can't find data record in database.", DML_MISSING
    )


def course_completion(call: Call, params: Record) -> Any:
    """``core_completion_get_course_completion_status``: the course's criteria for one user."""
    course = find(call.world, "courses", id=params["courseid"])
    user = find(call.world, "users", id=params["userid"])
    if course is None or user is None:
        raise _unknown_record()
    if not course.get("enablecompletion", True):
        raise MoodleException("cannotviewreport", "You cannot view this report")
    if course["id"] not in call.enrolled(user["id"]):
        raise MoodleException("usernotenroled", "User is not enrolled in this course")
    criteria = []
    for quiz in sorted(call.world["quizzes"], key=lambda q: q["coursemodule"]):
        if quiz["course"] != course["id"]:
            continue
        done = find(call.world, "completions", userid=user["id"], cmid=quiz["coursemodule"])
        complete = bool(done and done["state"] in (1, 2))
        page = f"{call.url}/mod/quiz/view.php?id={quiz['coursemodule']}"
        link = f'<a href="{page}">{quiz["name"]}</a>'
        status = "Yes" if complete else "No"
        criteria.append(
            fields(
                "type title status complete timecompleted details",
                *(4, "Activity completion", status, complete),
                done["timecompleted"] if complete and done else None,
                fields(
                    "type criteria requirement status",
                    *("Activity completion", link, "Achieving grade", status),
                ),
            )
        )
    if not criteria:
        raise MoodleException("nocriteriaset", "No completion criteria set for this course")
    completed = all(c["complete"] for c in criteria)
    return {
        "completionstatus": fields("completed aggregation completions", completed, 1, criteria),
        "warnings": [],
    }


def update_course(call: Call, params: Record) -> Any:
    """``core_courseformat_update_course``: a state action on course modules; the state updates
    as a JSON-encoded text."""
    action = params["action"]
    course = find(call.world, "courses", id=params["courseid"])
    if course is None:
        raise _unknown_record()
    if action not in CM_ACTIONS:
        message = f"Invalid course state action {action} in core_courseformat\\stateactions"
        raise MoodleException("generalexceptionmessage", message, MOODLE_EXCEPTION)
    updates = []
    for cmid in params["ids"]:
        module = find(call.world, "modules", id=cmid)
        if module is None or module["course"] != course["id"]:
            raise _unknown_record()
        module["visible"] = CM_ACTIONS[action]
        module["visibleoncoursepage"] = 1
        updates.append(
            {"name": "cm", "action": "put",
             "fields": {"id": str(cmid), "visible": bool(module["visible"]), "stealth": False}}
        )  # fmt: skip
    return json.dumps(updates, separators=(",", ":"))


def course_module(call: Call, params: Record) -> Any:
    """``core_course_get_course_module``: the module as a manager sees it (the token's user may
    manage activities), with ``visible``."""
    module = find(call.world, "modules", id=params["cmid"])
    if module is None:
        raise _unknown_record()
    cm = fields(
        "id course module name modname instance section sectionnum groupmode groupingid "
        "completion idnumber added score indent visible visibleoncoursepage visibleold "
        "completiongradeitemnumber completionpassgrade completionview completionexpected "
        "showdescription downloadcontent availability",
        *(module["id"], module["course"], MODULE_TYPES[module["modname"]], module["name"]),
        *(module["modname"], module["instance"], module["course"] * 10, 1, 0, 0, 0),
        *(module.get("idnumber", ""), module["added"], 0, 0, module["visible"]),
        *(module["visibleoncoursepage"], 0, None, 0, 0, 0, 0, 1, None),
    )
    return {"cm": cm, "warnings": []}


#: The course functions by name, served beside ``moodle_functions.FUNCTIONS``.
COURSE_FUNCTIONS: dict[str, Function] = {
    "core_completion_get_course_completion_status": course_completion,
    "core_courseformat_update_course": update_course,
    "core_course_get_course_module": course_module,
}


def add_module(state: SandboxState, name: str, body: Record) -> Record:
    """A course module of content in ``course`` (``name``, ``modname`` page by default, optional
    ``idnumber``), hidden until shown."""
    world = known(state, name)
    world.setdefault("modules", [])
    if find(world, "courses", id=body.get("course")) is None:
        raise RecordError(400, "course must be the id of a course of the site")
    modname = body.get("modname", "page")
    if modname not in MODULE_TYPES or not isinstance(body.get("name"), str):
        raise RecordError(400, f"needs a name, and modname one of {list(MODULE_TYPES)}")
    number: int = world["next"]["cm"]
    world["next"]["cm"] = number + 1
    module = {
        "id": number,
        "course": body["course"],
        "modname": modname,
        "instance": number,
        "name": body["name"],
        "idnumber": str(body.get("idnumber", "")),
        "added": now(state),
        "visible": 0,
        "visibleoncoursepage": 1,
    }
    world["modules"].append(module)
    return module


def set_course(state: SandboxState, name: str, course_id: int, body: Record) -> Record:
    """Turn a course's completion tracking on or off (``enablecompletion``)."""
    course = find(known(state, name), "courses", id=course_id)
    if course is None:
        raise RecordError(404, f"no course {course_id}")
    if "enablecompletion" in body:
        course["enablecompletion"] = bool(body["enablecompletion"])
    return course
