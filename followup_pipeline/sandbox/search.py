"""EspoCRM's list search, read from a request as EspoCRM's ``Core/Record/SearchParamsFetcher``
reads it: ``where`` (or ``whereGroup``, its modern name, which wins when both are given),
``select`` (or its alias ``attributeSelect``, which wins), ``maxSize``, ``offset``, ``orderBy``
(legacy ``sortBy``), ``order`` (legacy ``asc``), ``primaryFilter``, ``boolFilterList`` and
``textFilter`` (or ``q``); or all of them as one JSON ``searchParams``, which then replaces the
others. EspoCRM reads no other parameter (``filterList`` is read and then dropped by
``SearchParams::fromRaw``), and neither does the sandbox."""

import bisect
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from followup_pipeline.sandbox.errors import espo_error
from followup_pipeline.sandbox.filters import (
    ENTITIES,
    EntityFilters,
    SearchError,
    Test,
    bool_test,
    every,
    items_of,
    primary_test,
    text_test,
    where_test,
)

__all__ = ["MAX_SIZE", "SearchError", "php_query", "search"]

#: ``recordListMaxSizeLimit``: the most a page may hold, and its size when none is asked.
MAX_SIZE = 200
_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])+)$")
_PART = re.compile(r"\[([^\[\]]*)\]")

Record = dict[str, Any]


def _next_index(node: dict[str, Any]) -> str:
    numbers = [int(key) for key in node if key.lstrip("-").isdigit()]
    return str(max(numbers) + 1 if numbers else 0)


def php_query(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """A query string as PHP's ``parse_str`` makes it: ``a[0][b]=1`` nests (arrays as dicts of
    string keys, in order), ``a[]`` appends, a later value replaces an earlier one."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        match = _KEY.match(key)
        if match is None:
            result[key] = value
            continue
        node = result.get(match[1])
        if not isinstance(node, dict):
            node = result[match[1]] = {}
        parts = _PART.findall(match[2])
        for part in parts[:-1]:
            part = part or _next_index(node)
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1] or _next_index(node)] = value
    return result


@dataclass
class _Params:
    """One request's search, as EspoCRM's ``SearchParams`` holds it."""

    where: list[Any] = field(default_factory=list)
    select: list[str] | None = None
    max_size: int | None = None
    offset: int | None = None
    order_by: str | None = None
    order: str | None = None
    primary: str | None = None
    bools: list[str] = field(default_factory=list)
    text: str | None = None


def _string(query: Mapping[str, Any], name: str) -> str | None:
    """``Request::getQueryParam``: the value when it is a string, else None."""
    value = query.get(name)
    return value if isinstance(value, str) else None


def _integer(text: str | None, name: str) -> int | None:
    if text is None or text == "":
        return None
    if not re.fullmatch(r"-?\d+", text) or int(text) < 0:
        raise SearchError(400, f"Bad {name}.")
    return int(text)


def _strings(value: Any, name: str) -> list[str]:
    listed = items_of(value)
    if listed is None or not all(isinstance(item, str) for item in listed):
        raise SearchError(400, f"{name} has non-string item.")
    return listed


def _from_query(query: Mapping[str, Any]) -> _Params:
    """``fetchRawMultipleParams``: each parameter on its own."""
    params = _Params()
    where = query["whereGroup"] if "whereGroup" in query else query.get("where")
    params.where = items_of(where) or [] if isinstance(where, dict) else []
    params.max_size = _integer(_string(query, "maxSize"), "maxSize")
    params.offset = _integer(_string(query, "offset"), "offset")
    params.order_by = _string(query, "orderBy") or _string(query, "sortBy") or None
    order, ascending = _string(query, "order"), _string(query, "asc")
    if order:
        params.order = order
    elif ascending:
        params.order = "ASC" if ascending == "true" else "DESC"
    params.primary = _string(query, "primaryFilter") or None
    bools = query.get("boolFilterList")
    if bools:
        params.bools = [bools] if isinstance(bools, str) else _strings(bools, "boolFilterList")
    text, quick = _string(query, "textFilter"), (_string(query, "q") or "").strip()
    params.text = text or quick or None
    select = _string(query, "attributeSelect")
    if select is None:
        select = _string(query, "select")
    if select and select != "0":  # PHP's falsy strings
        params.select = select.split(",")
    return params


def _from_json(text: str | None) -> _Params:
    """``fetchRawJsonSearchParams``, then ``SearchParams::fromRaw``'s checks."""
    try:
        raw = json.loads(text or "")
    except json.JSONDecodeError:
        raise SearchError(400, "Invalid search params JSON.") from None
    if isinstance(raw, list):  # a PHP array too, with no known key
        raw = {}
    if not isinstance(raw, dict):
        raise SearchError(400, "Bad request.")
    params = _Params()
    size, offset = raw.get("maxSize"), raw.get("offset")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
        raise SearchError(400, "maxSize must be integer.")
    if isinstance(offset, str) and re.fullmatch(r"-?\d+", offset):
        offset = int(offset)
    if offset is not None and (not isinstance(offset, int) or isinstance(offset, bool)):
        raise SearchError(400, "offset should be int.")
    params.max_size, params.offset = size, offset
    for name in ("orderBy", "order", "primaryFilter", "textFilter", "q"):
        if raw.get(name) is not None and not isinstance(raw[name], str):
            raise SearchError(400, f"{name} should be string.")
    if raw.get("select") is not None:
        if not isinstance(raw["select"], list):
            raise SearchError(400, "select should be array.")
        params.select = _strings(raw["select"], "select")
    where = raw.get("where")
    if where is not None and items_of(where) is None:
        raise SearchError(400, "where should be array.")
    params.where = items_of(where) or []
    params.bools = _strings(raw.get("boolFilterList") or [], "boolFilterList")
    params.order_by, params.order = raw.get("orderBy"), raw.get("order")
    params.primary = raw.get("primaryFilter")
    params.text = raw.get("textFilter") or raw.get("q") or None
    return params


def _test(params: _Params, entity: EntityFilters, attributes: set[str], today: str) -> Test | None:
    """The whole filter, compiled once: every ``where`` item, the primary filter, the bool
    filters and the text filter, all of which a record must pass."""
    tests = [where_test(item, attributes) for item in params.where]
    if params.primary:
        tests.append(primary_test(entity, params.primary, today))
    if params.bools:
        tests.append(bool_test(entity, params.bools))
    if params.text:
        tests.append(text_test(entity, params.text))
    return every(tests)


def _ids_wanted(where: list[Any]) -> list[str] | None:
    """The ids of a top-level ``id in (…)`` item, if there is one."""
    for item in where:
        if isinstance(item, dict) and item.get("type") == "in" and item.get("attribute") == "id":
            return [str(i) for i in items_of(item.get("value")) or []]
    return None


def search(
    request: Request,
    records: Iterable[Record],
    attributes: list[str],
    order_by: str,
    order: str,
    *,
    entity: str,
    by_id: Mapping[str, Record] | None = None,
    today: str = "",
) -> Response:
    """Answer a list request over ``records`` of ``entity`` exactly as EspoCRM's ``{total,
    list}``. With ``by_id`` (the records by id), an ``id in (…)`` item picks its records as a
    database's primary key would, instead of testing every record. ``today`` (``YYYY-MM-DD``)
    is the date of the ``todays`` primary filter."""
    query = php_query(request.query_params.multi_items())
    try:
        if "searchParams" in query:
            params = _from_json(_string(query, "searchParams"))
        else:
            params = _from_query(query)
        size = MAX_SIZE if params.max_size is None else params.max_size
        if size > MAX_SIZE:
            raise SearchError(403, f"Max size should not exceed {MAX_SIZE}. Use offset and limit.")
        offset = params.offset or 0
        order_by = params.order_by or order_by
        if order_by not in attributes:
            raise SearchError(400, f"Bad orderBy {order_by!r}.")
        order = (params.order or order).lower()
        if order not in ("asc", "desc"):
            raise SearchError(400, "order value is bad.")
        test = _test(params, ENTITIES[entity], set(attributes), today)
    except SearchError as error:
        return espo_error(error.status, error.reason)
    ids = _ids_wanted(params.where) if by_id is not None else None
    no_total = request.headers.get("x-no-total", "").lower() == "true"
    if by_id is not None and ids is None and no_total and order_by == "id" and order == "asc":
        # A keyset page (``id`` after the last one read, in id order, no total): as a database
        # walks its primary-key index, from the cursor until the page is full.
        page, more = _keyset_page(by_id, params.where, test, offset, size)
        return JSONResponse({"total": -1 if more else -2, "list": _selected(page, params)})
    if by_id is not None and ids is not None:
        records = [by_id[i] for i in dict.fromkeys(ids) if i in by_id]
    matched = list(records) if test is None else [r for r in records if test(r)]
    matched.sort(key=lambda r: str(r.get("id")))
    matched.sort(key=lambda r: (False, 0) if r.get(order_by) is None else (True, r[order_by]))
    if order == "desc":
        matched.reverse()
    page = matched[offset : offset + size]
    total = len(matched)
    if no_total:
        total = -1 if offset + len(page) < len(matched) else -2
    return JSONResponse({"total": total, "list": _selected(page, params)})


def _selected(page: list[Record], params: _Params) -> list[Record]:
    """The page with only the selected attributes (and ``id``)."""
    if not params.select or params.select == ["*"]:
        return page
    wanted = {"id", *params.select}
    return [{k: v for k, v in record.items() if k in wanted} for record in page]


#: The ids of a record map in order, kept while the map's size and newest key stay the same.
_SORTED_IDS: dict[int, tuple[tuple[int, str | None], list[str]]] = {}


def _sorted_ids(by_id: Mapping[str, Record]) -> list[str]:
    """The ids of ``by_id`` in order (an index: rebuilt when a record was added or removed)."""
    newest = next(reversed(by_id.keys()), None) if isinstance(by_id, dict) else None
    stamp = (len(by_id), newest)
    cached = _SORTED_IDS.get(id(by_id))
    if cached is None or cached[0] != stamp:
        if len(_SORTED_IDS) > 8:  # maps of earlier sandboxes (a test session makes many)
            _SORTED_IDS.clear()
        cached = (stamp, sorted(by_id))
        _SORTED_IDS[id(by_id)] = cached
    return cached[1]


def _keyset_page(
    by_id: Mapping[str, Record], where: list[Any], test: Test | None, offset: int, size: int
) -> tuple[list[Record], bool]:
    """Up to ``size`` records that pass ``test``, in id order from a top-level ``id greaterThan``
    item's value (else from the start), after skipping ``offset``; and whether more follow."""
    ids = _sorted_ids(by_id)
    start = 0
    for item in where:
        keyset = isinstance(item, dict) and item.get("attribute") == "id"
        if keyset and item.get("type") == "greaterThan" and isinstance(item.get("value"), str):
            start = max(start, bisect.bisect_right(ids, item["value"]))
    page: list[Record] = []
    skipped = 0
    for record_id in itertools.islice(ids, start, None):
        record = by_id.get(record_id)
        if record is None or (test is not None and not test(record)):
            continue
        if skipped < offset:
            skipped += 1
            continue
        if len(page) == size:
            return page, True
        page.append(record)
    return page, False
