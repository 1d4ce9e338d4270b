"""What a follow-up task says: the deal, its account, the CRM link, the step and the summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

CLOSE_WORDS = {
    "won": "the deal was won",
    "lost": "the deal was lost",
    "exhausted": "every follow-up step was done and the deal went quiet",
    "subject_gone": "the deal was deleted in the CRM",
    "out_of_scope": "the deal left the watched stages",
}


@dataclass(frozen=True)
class TaskContent:
    """The text of one ClickUp task."""

    name: str
    markdown: str


def render_task(
    *,
    deal_name: str,
    account_name: str | None,
    crm_url: str | None,
    step_no: int,
    step_count: int,
    due_on: date,
    summary: tuple[str, str] | None,
) -> TaskContent:
    """The task for step ``step_no`` of ``step_count`` of a deal."""
    account = f" ({account_name})" if account_name else ""
    name = f"Follow up: {deal_name}{account} — step {step_no} of {step_count}"
    lines = [
        f"**Deal:** {deal_name}",
        f"**Account:** {account_name or '—'}",
        f"**Step:** {step_no} of {step_count}, due {due_on.isoformat()}",
    ]
    if crm_url:
        lines.append(f"**In the CRM:** [{deal_name}]({crm_url})")
    if summary:
        lines += ["", "**Latest e-mails:**", f"> {summary[0]}", f"> {summary[1]}"]
    return TaskContent(name=name, markdown="\n".join(lines))


def close_comment(reason: str) -> str:
    """The comment left on a task that Followup closes."""
    return f"Closed by Followup: {CLOSE_WORDS.get(reason, reason)}."


def assignees_for(
    crm_user_id: str | None, user_map: Mapping[str, int], default: int | None
) -> list[int]:
    """The ClickUp assignee mapped from the deal's CRM user, else the default, else nobody."""
    if crm_user_id is not None and crm_user_id in user_map:
        return [user_map[crm_user_id]]
    return [default] if default is not None else []
