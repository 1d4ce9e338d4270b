"""Read-only pages of the sandbox's world for people, at the addresses the machine's mails and
tasks link to, so that a demo's links open:

- EspoCRM's web app at ``/espocrm/`` (and ``/espocrm``): the deals, each linking to
  ``#Opportunity/view/{id}`` as the machine's CRM links do (``crm_deal_url``). That fragment never
  reaches a server (EspoCRM is a single-page app), so a few lines of script fetch the deal's page
  from ``/espocrm/_page/Opportunity/{id}`` and show it in place; that page is served to a reader
  without script as well.
- A ClickUp task at ``/clickup/t/{id}``: the ``url`` the sandbox's ClickUp answers a task with.

No key is asked: the pages only show, never change, and the sandbox is a local double. They are
served beside the vendors' gates, so they count no API call and no fault reaches them. Everything
taken from the world is escaped (deals and tasks carry hostile names in tests), and each page's
Content-Security-Policy allows no script but its own.
"""

import base64
import hashlib
import html
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from followup_pipeline.sandbox.demo import SALESPEOPLE
from followup_pipeline.sandbox.state import Record, SandboxState
from followup_pipeline.sandbox.tasks import TASK_PAGE

#: Where the CRM's app fetches one deal's page (below the app's own address).
DEAL_PAGE = "/espocrm/_page/Opportunity/{deal_id}"
#: The deal's activity the page shows: the link's name, what a record is called, its date field.
ACTIVITY = (("emails", "E-mail", "dateSent"), ("calls", "Call", "dateStart"),
            ("meetings", "Meeting", "dateStart"))  # fmt: skip
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem}"
    "table{border-collapse:collapse}td,th{text-align:left;padding:.25rem .75rem .25rem 0;"
    "vertical-align:top}.text{white-space:pre-wrap}.muted{color:#666}"
)
#: The app's script: show the deal its fragment names, or the list without one.
SCRIPT = """
const main = document.querySelector("main"), list = main.cloneNode(true), title = document.title;
async function show() {
  const match = /^#Opportunity\\/view\\/([^/?#]+)/.exec(location.hash);
  if (!match) {
    main.replaceChildren(...list.cloneNode(true).childNodes);
    document.title = title;
    return;
  }
  const answer = await fetch(main.dataset.pages + match[1]);
  const page = new DOMParser().parseFromString(await answer.text(), "text/html");
  main.replaceChildren(...document.adoptNode(page.querySelector("main")).childNodes);
  document.title = page.title;
}
addEventListener("hashchange", show);
show();
"""
_SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
APP_POLICY = f"{POLICY}; connect-src 'self'; script-src 'sha256-{_SCRIPT_HASH}'"
#: The demo's salespeople by their ClickUp user id (a task's assignee carries only a username).
PEOPLE = {clickup_id: name for _, name, clickup_id, _ in SALESPEOPLE}


def _text(value: Any) -> str:
    """A value as escaped text; an empty one as a dash."""
    return "—" if value is None or value == "" else html.escape(str(value))


def _page(title: str, body: str, *, status: int = 200, script: bool = False) -> HTMLResponse:
    """A whole page: ``title`` (raw text, escaped here) and ``body`` (escaped HTML)."""
    tail = f"<script>{SCRIPT}</script>" if script else ""
    text = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}{tail}</body></html>"
    )
    headers = {"Content-Security-Policy": APP_POLICY if script else POLICY}
    return HTMLResponse(text, status_code=status, headers=headers)


def _missing(what: str, given: str) -> HTMLResponse:
    """The 404 page of an id the sandbox does not hold."""
    return _page("Not found", f"<main><h1>No {what} {_text(given)}</h1></main>", status=404)


def _fields(rows: list[tuple[str, Any]]) -> str:
    """A table of labels and values (the values escaped here)."""
    cells = "".join(f"<tr><th>{label}</th><td>{_text(value)}</td></tr>" for label, value in rows)
    return f"<table>{cells}</table>"


def _amount(deal: Record) -> str | None:
    amount = deal.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        return None if amount is None else str(amount)
    return f"{amount:,.2f} {deal.get('amountCurrency') or ''}".strip()


def _root(request: Request) -> str:
    """The sandbox's own path (``/``, or the root path it is served under), without its slash."""
    return request.base_url.path.rstrip("/")


def deal_list(state: SandboxState, root: str) -> str:
    """The CRM app's main part: every deal, each linking to its view in the app."""
    rows = "".join(
        f'<tr><td><a href="#Opportunity/view/{html.escape(quote(deal["id"], safe=""))}">'
        f"{_text(deal.get('name'))}</a></td><td>{_text(deal.get('stage'))}</td>"
        f"<td>{_text(_amount(deal))}</td><td>{_text(deal.get('assignedUserName'))}</td></tr>"
        for deal in sorted(state.deals.values(), key=lambda d: str(d.get("name")).casefold())
    )
    pages = html.escape(root + DEAL_PAGE.format(deal_id=""))
    return (
        f'<main data-pages="{pages}"><h1>Opportunities</h1>'
        f'<p class="muted">The sandbox\'s EspoCRM, read only: {len(state.deals)} deals.</p>'
        "<table><tr><th>Name</th><th>Stage</th><th>Amount</th><th>Assigned user</th></tr>"
        f"{rows}</table></main>"
    )


def deal_view(state: SandboxState, deal: Record, root: str) -> str:
    """One deal's main part: its fields, its description and its activity, newest first."""
    fields = _fields([
        ("Stage", deal.get("stage")), ("Amount", _amount(deal)),
        ("Account", deal.get("accountName")), ("Contact", deal.get("contactName")),
        ("Assigned user", deal.get("assignedUserName")), ("Close date", deal.get("closeDate")),
        ("Probability", deal.get("probability")), ("Created", deal.get("createdAt")),
        ("Modified", deal.get("modifiedAt")),
    ])  # fmt: skip
    links = state.activities.get(deal["id"], {})  # (read: state.activity() would add an entry)
    done = sorted(
        ((str(record.get(field) or ""), what, record) for kind, what, field in ACTIVITY
         for record in links.get(kind, [])),
        key=lambda item: item[0], reverse=True,
    )  # fmt: skip
    activity = "".join(
        f"<tr><td>{_text(when)}</td><td>{what}</td>"
        f"<td>{_text(record.get('subject') or record.get('name'))}</td>"
        f"<td>{_text(record.get('status'))}</td></tr>"
        for when, what, record in done
    )
    return (
        f'<main><p><a href="{html.escape(root)}/espocrm/">All opportunities</a></p>'
        f"<h1>{_text(deal.get('name'))}</h1>{fields}"
        f'<h2>Description</h2><p class="text">{_text(deal.get("description"))}</p>'
        f"<h2>Activity</h2><table>{activity or '<tr><td>none</td></tr>'}</table></main>"
    )


def _moment(millis: Any) -> str | None:
    """A ClickUp date (a string of Unix milliseconds) as UTC text."""
    if millis is None or not str(millis).isdigit():
        return None
    return f"{datetime.fromtimestamp(int(millis) / 1000, UTC):%Y-%m-%d %H:%M} UTC"


def task_view(state: SandboxState, task: Record) -> str:
    """One task's page body: its fields, its description as text and its comments."""
    people = ", ".join(
        PEOPLE.get(person.get("id"), str(person.get("username"))) for person in task["assignees"]
    )
    fields = _fields([
        ("Status", task["status"]["status"]), ("List", task["list"].get("name")),
        ("Due", _moment(task.get("due_date"))), ("Assignees", people),
        ("Priority", (task.get("priority") or {}).get("priority")),
        ("Tags", ", ".join(tag["name"] for tag in task["tags"])),
        ("Created", _moment(task.get("date_created"))),
        ("Closed", _moment(task.get("date_closed"))),
    ])  # fmt: skip
    comments = "".join(
        f'<tr><td>{_text(_moment(c.get("date")))}</td><td class="text">'
        f"{_text(c.get('comment_text'))}</td></tr>"
        for c in sorted(state.comments.get(task["id"], []), key=lambda c: int(c["date"]))
    )
    return (
        f"<main><h1>{_text(task.get('name'))}</h1>"
        f'<p class="muted">The sandbox\'s ClickUp, read only: task {_text(task["id"])}.</p>'
        f'{fields}<h2>Description</h2><p class="text">{_text(task.get("description"))}</p>'
        f"<h2>Comments</h2><table>{comments or '<tr><td>none</td></tr>'}</table></main>"
    )


def page_routes(state: SandboxState) -> list[Route]:
    """The pages' routes, to be placed before the vendors' mounts."""

    async def crm_app(request: Request) -> HTMLResponse:
        return _page("EspoCRM (sandbox)", deal_list(state, _root(request)), script=True)

    async def deal_page(request: Request) -> HTMLResponse:
        deal = state.deals.get(request.path_params["deal_id"])
        if deal is None:
            return _missing("opportunity", request.path_params["deal_id"])
        return _page(str(deal.get("name")), deal_view(state, deal, _root(request)))

    async def task_page(request: Request) -> HTMLResponse:
        task = state.tasks.get(request.path_params["task_id"])
        if task is None:
            return _missing("task", request.path_params["task_id"])
        return _page(str(task.get("name")), task_view(state, task))

    return [
        Route("/espocrm", crm_app, methods=["GET"]),
        Route("/espocrm/", crm_app, methods=["GET"]),
        Route(DEAL_PAGE, deal_page, methods=["GET"]),
        Route(TASK_PAGE, task_page, methods=["GET"]),
    ]
