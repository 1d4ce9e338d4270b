"""EspoCRM's list filters, compiled once per request into one test of a record: ``where`` items
(``and``, ``or`` and ``not`` groups too), primary filters, bool filters and the text filter, as
EspoCRM's ``Core/Select`` applies them for each entity (the entity's ``selectDefs`` and
``entityDefs`` in ``Modules/Crm/Resources/metadata``)."""

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Record = dict[str, Any]
Test = Callable[[Record], bool]

#: The user the API key acts as. Nothing is assigned to it, followed by it or shared with it
#: unless a test says so (``assignedUserId``).
API_USER_ID = "5f1a0c2b3d4e5f600"
#: Stages of probability 100 and 0 in EspoCRM's default ``stage.probabilityMap``.
WON_STAGES = ("Closed Won",)
LOST_STAGES = ("Closed Lost",)
#: ``textFilterContainsMinLength``: a shorter text is matched as a prefix even in a text field.
CONTAINS_MIN_LENGTH = 4


class SearchError(ValueError):
    """A search parameter EspoCRM would refuse: the status and the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _like(value: Any, text: str) -> Any:
    """``text`` converted to the type of a record's ``value`` for comparisons."""
    if isinstance(value, bool):
        return text.lower() in ("true", "1")
    if isinstance(value, int | float):
        try:
            return float(text)
        except ValueError:
            return text
    return text


def _cmp(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def test(value: Any, wanted: Any) -> bool:
        if value is None:
            return False
        try:
            return op(value, _like(value, str(wanted)))
        except TypeError:
            return False

    return test


def _one_of(value: Any, wanted: Any) -> bool:
    items = wanted if isinstance(wanted, list) else [wanted]
    return value is not None and any(value == _like(value, str(item)) for item in items)


@functools.lru_cache(maxsize=256)
def _pattern(text: str) -> re.Pattern[str]:
    """A SQL ``LIKE`` pattern (``%`` any run, ``_`` one character), case-insensitive as MySQL's
    default collation compares."""
    parts = (".*" if c == "%" else "." if c == "_" else re.escape(c) for c in text)
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def _like_test(value: Any, wanted: Any) -> bool:
    return value is not None and _pattern(str(wanted)).fullmatch(str(value)) is not None


def _between(value: Any, wanted: Any) -> bool:
    low, high = wanted[0], wanted[1]
    return _cmp(lambda a, b: a >= b)(value, low) and _cmp(lambda a, b: a <= b)(value, high)


PREDICATES: dict[str, Callable[[Any, Any], bool]] = {
    "equals": _cmp(lambda a, b: a == b),
    "notEquals": lambda a, b: not _cmp(lambda x, y: x == y)(a, b),
    "in": _one_of,
    "notIn": lambda a, b: not _one_of(a, b),
    "isNull": lambda a, _b: a is None or a == "",
    "isNotNull": lambda a, _b: a is not None and a != "",
    "isTrue": lambda a, _b: a is True,
    "isFalse": lambda a, _b: a is False,
    "greaterThan": _cmp(lambda a, b: a > b),
    "lessThan": _cmp(lambda a, b: a < b),
    "greaterThanOrEquals": _cmp(lambda a, b: a >= b),
    "lessThanOrEquals": _cmp(lambda a, b: a <= b),
    "after": _cmp(lambda a, b: a > b),
    "before": _cmp(lambda a, b: a < b),
    "between": _between,
    "contains": _cmp(lambda a, b: str(b).lower() in str(a).lower()),
    "notContains": lambda a, b: not _cmp(lambda x, y: str(y).lower() in str(x).lower())(a, b),
    "startsWith": _cmp(lambda a, b: str(a).lower().startswith(str(b).lower())),
    "endsWith": _cmp(lambda a, b: str(a).lower().endswith(str(b).lower())),
    "like": _like_test,
    "notLike": lambda a, b: a is not None and not _like_test(a, b),
}
#: Types whose value must be an array (``processIn``, ``processNotIn``, ``processBetween``).
_ARRAY_VALUED = {"in": 1, "notIn": 1, "between": 2}
#: Types EspoCRM has that the sandbox does not evaluate (relative dates, links, arrays,
#: sub-queries): refused by name rather than answered wrongly.
_UNSUPPORTED = re.compile(
    r"today|past|future|ever|on|notOn|lastSevenDays|lastXDays|nextXDays|olderThanXDays|"
    r"afterXDays|(current|last|next)(Month|Quarter|Year|FiscalYear|FiscalQuarter)|"
    r"isLinkedWith.*|isNotLinkedWith|array.*|subQuery.*|expression|column.*|none|any|"
    r"inCategory|isUserFromTeams"
)


def items_of(value: Any) -> list[Any] | None:
    """A PHP array's values in order (a parsed query's ``{"0": …}`` or a JSON list); else None."""
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return value
    return None


def every(tests: list[Test]) -> Test | None:
    """One test that passes when all of ``tests`` do (None: no test at all)."""
    if not tests:
        return None
    if len(tests) == 1:
        return tests[0]
    if len(tests) == 2:
        first, second = tests
        return lambda record: first(record) and second(record)
    return lambda record: all(test(record) for test in tests)


def where_test(item: Any, attributes: set[str]) -> Test:
    """The test of one ``where`` item, as EspoCRM's ``ItemGeneralConverter`` reads it."""
    if not isinstance(item, dict):
        raise SearchError(400, "Bad where item.")
    kind, attribute, value = item.get("type"), item.get("attribute"), item.get("value")
    if not kind or not isinstance(kind, str):
        raise SearchError(400, "Bad where item. No 'type'.")
    if kind in ("and", "or", "not"):
        members = items_of(value)
        if members is None:
            raise SearchError(400, "Bad where item.")
        tests = [where_test(member, attributes) for member in members]
        if kind == "or":
            return lambda record: any(test(record) for test in tests)
        group = every(tests) or (lambda _record: True)
        return group if kind == "and" else (lambda record: not group(record))
    if not attribute:
        raise SearchError(400, "Bad where item. No 'attribute'.")
    if kind not in PREDICATES:
        if _UNSUPPORTED.fullmatch(kind):
            raise SearchError(400, f"Where item type '{kind}' is not served by the sandbox.")
        raise SearchError(400, f"Unknown where item type '{kind}'.")
    if attribute not in attributes:
        raise SearchError(400, f"Bad where attribute {attribute!r}.")
    if kind in _ARRAY_VALUED:
        listed = items_of(value)
        if listed is None or len(listed) < _ARRAY_VALUED[kind]:
            raise SearchError(400, f"Bad where item '{kind}'.")
        value = listed
    predicate = PREDICATES[kind]
    return lambda record: predicate(record.get(attribute), value)


@dataclass(frozen=True)
class EntityFilters:
    """What EspoCRM's metadata gives one entity: primary filters and text-filter fields."""

    name: str
    primary: Mapping[str, Test] = field(default_factory=dict)
    #: ``textFilterFields`` (default ``["name"]``).
    text_fields: tuple[str, ...] = ("name",)
    #: Fields a text filter searches inside (text fields, ``textFilterUseContainsAttributeList``),
    #: not only at their start.
    contains_fields: frozenset[str] = frozenset()
    #: Fields of type e-mail: a text with a space never matches them.
    email_fields: frozenset[str] = frozenset()


def _none(_record: Record) -> bool:
    return False


def _status_in(*statuses: str) -> Test:
    return lambda record: record.get("status") in statuses


#: Every entity's core primary filters: ``all`` and ``one`` select everything; ``followed`` and
#: ``starred``, what the API user follows or starred: nothing.
_CORE_PRIMARY: dict[str, Test] = {
    "all": lambda _record: True,
    "one": lambda _record: True,
    "followed": _none,
    "starred": _none,
}
_ACTIVITY_PRIMARY: dict[str, Test] = {
    "planned": _status_in("Planned"),  # scopes.*.activityStatusList
    "held": _status_in("Held"),  # scopes.*.completedStatusList
}
ENTITIES = {
    "Opportunity": EntityFilters(
        "Opportunity",
        {
            "open": lambda r: r.get("stage") not in (*WON_STAGES, *LOST_STAGES),
            "won": lambda r: r.get("stage") in WON_STAGES,
            "lost": lambda r: r.get("stage") in LOST_STAGES,
        },
    ),
    "Lead": EntityFilters(
        "Lead",
        {
            "actual": lambda r: r.get("status") not in ("Converted", "Recycled", "Dead"),
            "active": lambda r: r.get("status") not in ("Converted", "Recycled", "Dead"),
            "converted": _status_in("Converted"),
        },
        text_fields=("name", "accountName", "emailAddress"),
        email_fields=frozenset({"emailAddress"}),
    ),
    "Call": EntityFilters("Call", _ACTIVITY_PRIMARY),
    "Meeting": EntityFilters("Meeting", _ACTIVITY_PRIMARY),
    # Email searches name, bodyPlain and body; name is in textFilterUseContainsAttributeList and
    # the bodies are text fields (EspoCRM adds a full-text index; the sandbox reads the text).
    "Email": EntityFilters(
        "Email",
        text_fields=("name", "bodyPlain", "body"),
        contains_fields=frozenset({"name", "bodyPlain", "body"}),
    ),
}


def primary_test(entity: EntityFilters, name: str, today: str) -> Test:
    """``primaryFilter``: the entity's own or a core one; an unknown one is EspoCRM's 400."""
    if name == "todays" and entity.name in ("Call", "Meeting"):
        return lambda record: str(record.get("dateStart") or "")[:10] == today
    test = entity.primary.get(name) or _CORE_PRIMARY.get(name)
    if test is None:
        raise SearchError(400, f"No primary filter '{name}' for '{entity.name}'.")
    return test


def bool_test(entity: EntityFilters, names: list[str]) -> Test:
    """``boolFilterList``: any of them (EspoCRM ORs them). ``onlyMy`` is what is assigned to the
    API user; ``followed`` and ``shared`` select nothing of the API user's."""
    tests: list[Test] = []
    for name in names:
        if name == "onlyMy":
            tests.append(lambda record: record.get("assignedUserId") == API_USER_ID)
        elif name in ("followed", "shared"):
            tests.append(_none)
        else:
            raise SearchError(400, f"No bool filter '{name}' for '{entity.name}'.")
    return lambda record: any(test(record) for test in tests)


def text_test(entity: EntityFilters, text: str) -> Test:
    """``textFilter`` (or ``q``) as EspoCRM's ``Text\\DefaultFilter``: each text-filter field
    ``LIKE 'text%'`` (``'%text%'`` where it searches inside), or ``*`` as a wildcard; any field."""
    wildcard = "*" in text
    patterns: list[tuple[str, re.Pattern[str]]] = []
    for name in entity.text_fields:
        if name in entity.email_fields and " " in text:
            continue
        if wildcard:
            expression = text.replace("*", "%")
        elif name in entity.contains_fields and len(text) >= CONTAINS_MIN_LENGTH:
            expression = f"%{text}%"
        else:
            expression = f"{text}%"
        patterns.append((name, _pattern(expression)))

    def test(record: Record) -> bool:
        return any(
            record.get(name) is not None and pattern.fullmatch(str(record[name])) is not None
            for name, pattern in patterns
        )

    return test
