"""Task text from untrusted CRM names: one-line titles, escaped markdown, only the CRM's link."""

from __future__ import annotations

import re
from datetime import date

import pytest

from followup_pipeline.domain.tasks import render_task, safe_link

CRM = "https://crm.example.com/#Opportunity/view/d1"


def _render(name: str, account: str | None = "Acme GmbH", url: str | None = CRM) -> tuple[str, str]:
    content = render_task(
        deal_name=name,
        account_name=account,
        crm_url=url,
        step_no=1,
        step_count=3,
        due_on=date(2026, 3, 9),
        summary=None,
    )
    return content.name, content.markdown


def test_tasks_a_name_cannot_make_a_link() -> None:
    _, markdown = _render("Offer](javascript:alert(1))")
    links = re.findall(r"(?<!\\)\]\((?P<url>[^)]*)\)", markdown)
    assert links == [CRM]


def test_tasks_title_is_one_line_without_control_characters() -> None:
    title, markdown = _render("Offer\nInjected: yes\x00\x1b[31m", "Acme\r\nGmbH")
    assert not {"\n", "\r", "\x00", "\x1b"} & set(title)
    assert title == "Follow up: Offer Injected: yes [31m (Acme GmbH) — step 1 of 3"
    assert markdown.splitlines()[0] == "**Deal:** Offer Injected: yes \\[31m"


def test_tasks_markup_in_names_is_literal() -> None:
    _, markdown = _render("*bold* _it_ `code` <b>x</b> | ~~s~~", "A_B")
    assert markdown.splitlines()[0] == (
        "**Deal:** \\*bold\\* \\_it\\_ \\`code\\` \\<b\\>x\\</b\\> \\| \\~\\~s\\~\\~"
    )
    assert markdown.splitlines()[1] == "**Account:** A\\_B"


def test_tasks_very_long_name_gives_a_bounded_title() -> None:
    title, _ = _render("x" * 5000)
    assert len(title) < 300
    assert title.endswith("— step 1 of 3")


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "data:text/html,<b>",
        "//evil.example.com/x",
        "https://crm.example.com/x) [y](https://evil.example.com",
        "https://crm.example.com/x\nmore",
        "",
        None,
    ],
)
def test_tasks_only_an_http_url_is_linked(url: str | None) -> None:
    assert safe_link(url) is None
    _, markdown = _render("Offer", url=url)
    assert "In the CRM" not in markdown


def test_tasks_the_crm_url_is_linked() -> None:
    assert safe_link(CRM) == CRM
    _, markdown = _render("Offer")
    assert markdown.splitlines()[-1] == f"**In the CRM:** [Offer]({CRM})"


@pytest.mark.parametrize(
    "text",
    [
        "see https://evil.example/x",
        "visit www.evil.example today",
        "write to boss@evil.example",
        "ftp://evil.example/file",
        "mailto:boss@evil.example",
    ],
)
def test_tasks_text_a_renderer_would_autolink_is_shown_as_code(text: str) -> None:
    _, markdown = _render(text, account=text)
    deal_line, account_line = markdown.splitlines()[:2]
    for line in (deal_line, account_line):
        outside_code = re.sub(r"`[^`]*`", "", line)
        assert "evil.example" not in outside_code
    assert markdown.splitlines()[-1].endswith(f"({CRM})")


def test_tasks_entities_and_plain_colons_stay_literal() -> None:
    _, markdown = _render("Müller & Söhne &lt;b&gt; Angebot:Rollout")
    assert markdown.splitlines()[0] == "**Deal:** Müller \\& Söhne \\&lt;b\\&gt; Angebot:Rollout"
