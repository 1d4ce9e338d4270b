"""The Moodle double's user function: ``core_user_get_users_by_field``, the users' descriptions
with their language and time zone, which the participants' listing lacks. As Moodle 5.1
declares and fills them (``public/user/externallib.php``'s ``user_description``,
``public/user/lib.php``'s ``user_get_user_details``; the fixture of
``followup_pipeline_tests/fixtures/moodle`` names the files and commits).

The token's user sees a user it shares a course with (the course profile), itself, or anyone
when the site's ``userdetails`` is on. That flag stands for ``moodle/user:viewalldetails`` (and
a site that does not hide the time zone, ``hiddenuserfields``): on (the default), a user comes
with ``username``, ``idnumber``, ``auth``, ``lang`` and ``timezone``; off, without them. A user
is answered only when the field searched by is among what the token's user sees of them, as
Moodle does; ids not found are left out.
"""

import re
from typing import Any

from followup_pipeline.sandbox.moodle_call import (
    Call,
    Function,
    MoodleException,
    fields,
    invalid,
)
from followup_pipeline.sandbox.moodle_demo import full_name
from followup_pipeline.sandbox.state import Record

#: The fields ``core_user_get_users_by_field`` searches by.
SEARCH_FIELDS = ("id", "idnumber", "username", "email")
#: The number PHP's ``(int)`` reads from the start of a text (PARAM_INT; none: 0).
_LEADING = re.compile(r"\s*[+-]?[0-9]+")
#: The fields only a token user who sees all of a user's details gets (``userdetails``).
DETAILS: tuple[str, ...] = (
    "username",
    "department",
    "idnumber",
    "auth",
    "confirmed",
    "lang",
    "theme",
)
DETAILS += ("timezone", "mailformat", "trackforums")


def _coding_error(field: str) -> MoodleException:
    """``coding_exception``: a search field Moodle does not know (a word: PARAM_ALPHA)."""
    text = "Coding error detected, it must be fixed by a programmer: invalid field parameter"
    said = f"The search field '{field}' is not supported, look at the web service documentation"
    return MoodleException("codingerror", text, "core\\exception\\coding_exception", said)


def users_by_field(call: Call, params: Record) -> Any:
    """``core_user_get_users_by_field``: the users whose ``field`` is one of ``values``, by
    id, each as ``user_description`` declares it."""
    field, values = params["field"], params["values"]
    if field not in SEARCH_FIELDS:
        raise _coding_error(field)
    wanted: set[Any] = set()
    for value in values:
        if field != "id":
            wanted.add(value)
            continue
        digits = _LEADING.match(value)
        cleaned = int(digits[0]) if digits else 0
        if not digits or value[digits.end() :].strip():  # not a number: $value != $cleaned
            raise invalid(f"The field 'id' value is invalid: {value}(cleaned value: {cleaned})")
        wanted.add(cleaned)
    found = sorted(
        (u for u in call.world["users"] if u.get(field) in wanted), key=lambda u: u["id"]
    )
    described = [description(call, user) for user in found if visible(call, user)]
    return [record for record in described if record.get(field)]


def visible(call: Call, user: Record) -> bool:
    """Whether the token's user may see the user's profile: its own, a course profile (a
    course shared), or any with the site's ``userdetails``."""
    if call.world.get("userdetails", True) or user["id"] == call.me.get("id"):
        return True
    return bool(set(call.enrolled(user["id"])) & set(call.enrolled(call.me.get("id", 0))))


def description(call: Call, user: Record) -> Record:
    """A user as ``user_description`` declares it, keys in declared order; what the user lacks
    is left out, and so is what only ``moodle/user:viewalldetails`` sees, unless the site's
    ``userdetails`` is on (or the user is the token's own)."""
    world = call.world
    record = fields(
        "id username firstname lastname fullname email department idnumber firstaccess "
        "lastaccess auth suspended confirmed lang theme timezone mailformat trackforums city "
        "country profileimageurlsmall profileimageurl",
        *(user["id"], user["username"], user["firstname"], user["lastname"], full_name(user)),
        *(user.get("email"), "", user.get("idnumber") or None, 0, 0, "manual", False, True),
        *(user.get("lang", world["lang"]), "", user.get("timezone", world["timezone"]) or None),
        *(1, 0, user.get("city"), user.get("country"), call.picture("f2"), call.picture("f1")),
    )
    sees_all = world.get("userdetails", True) or user["id"] == call.me.get("id")
    hidden = () if sees_all else DETAILS
    return {k: v for k, v in record.items() if v is not None and k not in hidden}


#: The user functions by name, served beside ``moodle_functions.FUNCTIONS``.
USER_FUNCTIONS: dict[str, Function] = {"core_user_get_users_by_field": users_by_field}
