"""EspoCRM's list search: ``select``, ``maxSize``, ``offset``, ``orderBy``, ``order``, ``where``."""

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from followup_pipeline.sandbox.errors import espo_error

MAX_SIZE = 200
DEFAULT_SIZE = 20
_WHERE_KEY = re.compile(r"^where\[(\d+)\]\[(type|attribute|value)\](?:\[(\d*)\])?$")

Record = dict[str, Any]


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


PREDICATES: dict[str, Callable[[Any, Any], bool]] = {
    "equals": _cmp(lambda a, b: a == b),
    "notEquals": lambda a, b: not _cmp(lambda x, y: x == y)(a, b),
    "in": _one_of,
    "notIn": lambda a, b: not _one_of(a, b),
    "isNull": lambda a, _b: a is None or a == "",
    "isNotNull": lambda a, _b: a is not None and a != "",
    "greaterThan": _cmp(lambda a, b: a > b),
    "lessThan": _cmp(lambda a, b: a < b),
    "greaterThanOrEquals": _cmp(lambda a, b: a >= b),
    "lessThanOrEquals": _cmp(lambda a, b: a <= b),
    "after": _cmp(lambda a, b: a > b),
    "before": _cmp(lambda a, b: a < b),
    "contains": _cmp(lambda a, b: str(b).lower() in str(a).lower()),
    "startsWith": _cmp(lambda a, b: str(a).lower().startswith(str(b).lower())),
}


class SearchError(ValueError):
    """A search parameter EspoCRM would refuse: the status and the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _where(request: Request, attributes: set[str]) -> list[tuple[str, str, Any]]:
    clauses: dict[int, dict[str, Any]] = {}
    for key, value in request.query_params.multi_items():
        match = _WHERE_KEY.match(key)
        if match is None:
            continue
        index, part, sub = int(match[1]), match[2], match[3]
        clause = clauses.setdefault(index, {})
        if part == "value" and sub is not None:
            clause.setdefault("value", []).append(value)
        else:
            clause[part] = value
    result = []
    for index in sorted(clauses):
        clause = clauses[index]
        kind, attribute = clause.get("type"), clause.get("attribute")
        if kind not in PREDICATES:
            raise SearchError(400, f"Bad where type {kind!r}.")
        if attribute not in attributes:
            raise SearchError(400, f"Bad where attribute {attribute!r}.")
        result.append((kind, attribute, clause.get("value")))
    return result


def _integer(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not re.fullmatch(r"-?\d+", text) or int(text) < 0:
        raise SearchError(400, f"Bad {name}.")
    return int(text)


def search(
    request: Request,
    records: Iterable[Record],
    attributes: list[str],
    order_by: str,
    order: str,
    by_id: Mapping[str, Record] | None = None,
) -> Response:
    """Answer a list request over ``records`` exactly as EspoCRM's ``{total, list}``. With
    ``by_id`` (the records by id), an ``id in (…)`` clause picks its records as a database's
    primary key would, instead of testing every record."""
    try:
        size = _integer(request, "maxSize", DEFAULT_SIZE)
        if size > MAX_SIZE:
            raise SearchError(403, "Max size should not exceed 200. Use offset and limit.")
        offset = _integer(request, "offset", 0)
        clauses = _where(request, set(attributes))
        order_by = request.query_params.get("orderBy") or order_by
        if order_by not in attributes:
            raise SearchError(400, f"Bad orderBy {order_by!r}.")
        order = (request.query_params.get("order") or order).lower()
        if order not in ("asc", "desc"):
            raise SearchError(400, f"Bad order {order!r}.")
    except SearchError as error:
        return espo_error(error.status, error.reason)
    if by_id is not None:
        for kind, attribute, value in clauses:
            if kind == "in" and attribute == "id":
                ids = value if isinstance(value, list) else [value]
                records = [by_id[i] for i in dict.fromkeys(map(str, ids)) if i in by_id]
                break
    matched = [r for r in records if all(PREDICATES[k](r.get(a), v) for k, a, v in clauses)]
    matched.sort(key=lambda r: str(r.get("id")))
    matched.sort(key=lambda r: (False, 0) if r.get(order_by) is None else (True, r[order_by]))
    if order == "desc":
        matched.reverse()
    page = matched[offset : offset + size]
    select = request.query_params.get("select")
    if select:
        wanted = {"id", *(name.strip() for name in select.split(","))}
        page = [{k: v for k, v in record.items() if k in wanted} for record in page]
    total = len(matched)
    if request.headers.get("x-no-total", "").lower() == "true":
        total = -1 if offset + len(page) < len(matched) else -2
    return JSONResponse({"total": total, "list": page})
