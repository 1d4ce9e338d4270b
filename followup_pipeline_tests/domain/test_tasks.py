"""Task text: what to do and why now in the team's language (snapshots in ``de`` and ``en``), one-
line titles and escaped markdown from untrusted CRM names, only the CRM's link, and the comments
on tasks that Followup closes."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import date

import pytest

from followup_pipeline.domain.tasks import (
    Contact,
    Language,
    TaskFacts,
    amount_text,
    close_comment,
    closing,
    contact_of,
    render_task,
    safe_link,
)

CRM = "https://crm.example.com/#Opportunity/view/d1"
#: A deal of a seeded week: its step 1 fell due on Tuesday 10 March and fires two days late, on
#: Thursday; the last contact was an e-mail on Tuesday 3 March; its summary is in.
SEEDED = TaskFacts(
    deal_name="Rollout Lager Nord",
    account_name="Müller & Söhne GmbH",
    crm_url=CRM,
    stage="Proposal",
    amount=48500.0,
    currency="EUR",
    step_no=1,
    step_count=3,
    due_on=date(2026, 3, 10),
    today=date(2026, 3, 12),
    contact=Contact("email", date(2026, 3, 3)),
    summary=("Kunde prüft das Angebot intern.", "Rückfrage zum Liefertermin offen."),
)
SNAPSHOTS: dict[Language, tuple[str, str]] = {
    "de": (
        "Nachfassen: Rollout Lager Nord (Müller & Söhne GmbH) — Schritt 1 von 3",
        "**Aufgabe:** Bei Müller \\& Söhne GmbH nachfragen, ob das Angebot angekommen ist und ob"
        " es Fragen dazu gibt. Danach den Anruf oder die E-Mail am Deal im CRM erfassen; damit"
        " beginnt die Nachverfolgung neu.\n"
        "**Warum jetzt:** Schritt 1 von 3, überfällig seit 10. März. Letzter Kontakt vor 9 Tagen:"
        " E-Mail am 3. März.\n"
        "\n"
        "**Deal:** Rollout Lager Nord\n"
        "**Firma:** Müller \\& Söhne GmbH\n"
        "**Phase:** Proposal\n"
        "**Betrag:** 48.500,00 EUR\n"
        f"**Im CRM:** [Rollout Lager Nord]({CRM})\n"
        "\n"
        "**Letzte E-Mails:**\n"
        "> Kunde prüft das Angebot intern.\n"
        "> Rückfrage zum Liefertermin offen.",
    ),
    "en": (
        "Follow up: Rollout Lager Nord (Müller & Söhne GmbH) — step 1 of 3",
        "**Next step:** Ask Müller \\& Söhne GmbH whether the offer arrived and whether they have"
        " questions about it. Then log the call or e-mail on the deal in the CRM; that starts the"
        " follow-up again.\n"
        "**Why now:** Step 1 of 3, overdue since 10 March. Last contact 9 days ago: e-mail on"
        " 3 March.\n"
        "\n"
        "**Deal:** Rollout Lager Nord\n"
        "**Account:** Müller \\& Söhne GmbH\n"
        "**Stage:** Proposal\n"
        "**Amount:** 48,500.00 EUR\n"
        f"**In the CRM:** [Rollout Lager Nord]({CRM})\n"
        "\n"
        "**Latest e-mails:**\n"
        "> Kunde prüft das Angebot intern.\n"
        "> Rückfrage zum Liefertermin offen.",
    ),
}


def _render(name: str, account: str | None = "Acme GmbH", url: str | None = CRM) -> tuple[str, str]:
    content = render_task(
        replace(SEEDED, deal_name=name, account_name=account, crm_url=url, summary=None), "en"
    )
    return content.name, content.markdown


def _line(markdown: str, label: str) -> str:
    [line] = [line for line in markdown.splitlines() if line.startswith(f"**{label}:**")]
    return line


@pytest.mark.parametrize("language", ["de", "en"])
def test_tasks_snapshot_of_an_overdue_step_with_contact_and_summary(language: Language) -> None:
    content = render_task(SEEDED, language)
    assert (content.name, content.markdown) == SNAPSHOTS[language]


def test_tasks_say_what_to_do_for_the_first_middle_and_last_step() -> None:
    def instruction_line(step: int, account: str | None, language: Language) -> str:
        facts = replace(SEEDED, step_no=step, account_name=account)
        return _line(
            render_task(facts, language).markdown, "Aufgabe" if language == "de" else "Next step"
        )

    assert "ob das Angebot angekommen ist" in instruction_line(1, "Acme", "de")
    assert "wie es um die Entscheidung zum Angebot steht" in instruction_line(2, "Acme", "de")
    assert instruction_line(3, "Acme", "de").startswith(
        "**Aufgabe:** Letztes geplantes Nachfassen: Acme um eine Entscheidung zum Angebot bitten."
    )
    assert instruction_line(1, None, "de").startswith("**Aufgabe:** Beim Kunden nachfragen")
    assert instruction_line(3, None, "de").startswith(
        "**Aufgabe:** Letztes geplantes Nachfassen: den Kunden um eine Entscheidung"
    )
    assert instruction_line(2, "Acme", "en").startswith(
        "**Next step:** Ask Acme where their decision"
    )
    assert instruction_line(3, None, "en").startswith(
        "**Next step:** Last planned follow-up: ask the customer for a decision"
    )


@pytest.mark.parametrize(
    ("contact", "today", "de", "en"),
    [
        (
            Contact("none", date(2026, 3, 2)),
            date(2026, 3, 9),
            "Kein Kontakt erfasst, seit die Nachverfolgung am 2. März begann (vor 7 Tagen).",
            "No contact recorded since the follow-up began on 2 March (7 days ago).",
        ),
        (
            Contact("call", date(2026, 3, 11)),
            date(2026, 3, 12),
            "Letzter Kontakt gestern: Anruf am 11. März.",
            "Last contact yesterday: call on 11 March.",
        ),
        (
            Contact("meeting", date(2026, 3, 10)),
            date(2026, 3, 10),
            "Letzter Kontakt heute: Termin am 10. März.",
            "Last contact today: meeting on 10 March.",
        ),
        (
            contact_of(None, date(2025, 12, 30)),  # a reset recorded before its kind was
            date(2026, 1, 5),
            "Letzter Kontakt vor 6 Tagen: Aktivität am 30. Dezember 2025.",
            "Last contact 6 days ago: activity on 30 December 2025.",
        ),
    ],
)
def test_tasks_say_why_now_with_the_last_contact_and_days_since(
    contact: Contact, today: date, de: str, en: str
) -> None:
    facts = replace(SEEDED, contact=contact, today=today, due_on=today)
    assert _line(render_task(facts, "de").markdown, "Warum jetzt").endswith(f"heute fällig. {de}")
    assert _line(render_task(facts, "en").markdown, "Why now").endswith(f"due today. {en}")


def test_tasks_amount_in_the_teams_format_and_without_one() -> None:
    assert amount_text(1234567.5, "EUR", "de") == "1.234.567,50 EUR"
    assert amount_text(1234567.5, "EUR", "en") == "1,234,567.50 EUR"
    assert amount_text(None, "EUR", "de") == "—"
    assert amount_text(float("nan"), None, "en") == "—"
    assert amount_text(10.0, "<b>*", "en") == "10.00 \\<b\\>\\*"  # CRM text, escaped


def test_tasks_stage_and_currency_from_the_crm_are_literal() -> None:
    facts = replace(SEEDED, stage="[x](https://evil.example)", currency="`EUR`")
    markdown = render_task(facts, "en").markdown
    assert _line(markdown, "Stage") == "**Stage:** \\[x\\]\\(`https://evil.example)`"
    assert _line(markdown, "Amount") == "**Amount:** 48,500.00 \\`EUR\\`"
    links = re.findall(r"(?<!\\)\]\((?P<url>[^)]*)\)", markdown)
    assert links == [CRM]


@pytest.mark.parametrize(
    ("reason", "language", "comment"),
    [
        ("lost", "de", "Von Followup geschlossen: Der Deal wurde verloren."),
        ("won", "en", "Closed by Followup: the deal was won."),
        ("exhausted", "de", "Von Followup geschlossen: Alle Schritte sind erledigt, und seitdem "
         "gab es keinen Kontakt mehr."),
    ],
)  # fmt: skip
def test_tasks_close_comment_of_a_closed_watch(
    reason: str, language: Language, comment: str
) -> None:
    assert close_comment(reason, language) == comment


def test_tasks_closing_says_superseded_before_contact_before_the_watchs_reason() -> None:
    contact = Contact("email", date(2026, 3, 3))
    today = date(2026, 3, 18)
    assert closing(
        "de", today, superseded_by=2, step_count=3, contact=contact, closed_reason="won"
    ) == (
        "superseded",
        "Von Followup geschlossen: Schritt 2 von 3 ist jetzt fällig und hat eine eigene Aufgabe.",
    )
    assert closing(
        "en", today, superseded_by=None, step_count=3, contact=contact, closed_reason="won"
    ) == (
        "contact",
        "Closed by Followup: the customer was contacted (e-mail on 3 March); the follow-up"
        " starts again from there.",
    )
    assert closing(
        "de", today, superseded_by=None, step_count=3, contact=contact, closed_reason=None
    )[1] == (
        "Von Followup geschlossen: Es gab Kontakt (E-Mail am 3. März); die Nachverfolgung"
        " beginnt von dort neu."
    )
    assert closing(
        "en", today, superseded_by=None, step_count=3, contact=None, closed_reason="lost"
    ) == ("lost", "Closed by Followup: the deal was lost.")


def test_tasks_a_name_cannot_make_a_link() -> None:
    _, markdown = _render("Offer](javascript:alert(1))")
    links = re.findall(r"(?<!\\)\]\((?P<url>[^)]*)\)", markdown)
    assert links == [CRM]


def test_tasks_title_is_one_line_without_control_characters() -> None:
    title, markdown = _render("Offer\nInjected: yes\x00\x1b[31m", "Acme\r\nGmbH")
    assert not {"\n", "\r", "\x00", "\x1b"} & set(title)
    assert title == "Follow up: Offer Injected: yes [31m (Acme GmbH) — step 1 of 3"
    assert _line(markdown, "Deal") == "**Deal:** Offer Injected: yes \\[31m"


def test_tasks_markup_in_names_is_literal() -> None:
    _, markdown = _render("*bold* _it_ `code` <b>x</b> | ~~s~~", "A_B")
    assert _line(markdown, "Deal") == (
        "**Deal:** \\*bold\\* \\_it\\_ \\`code\\` \\<b\\>x\\</b\\> \\| \\~\\~s\\~\\~"
    )
    assert _line(markdown, "Account") == "**Account:** A\\_B"
    assert "Ask A\\_B whether" in _line(markdown, "Next step")


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
    for line in markdown.splitlines():
        outside_code = re.sub(r"`[^`]*`", "", line)
        assert "evil.example" not in outside_code
    assert markdown.splitlines()[-1].endswith(f"({CRM})")


def test_tasks_entities_and_plain_colons_stay_literal() -> None:
    _, markdown = _render("Müller & Söhne &lt;b&gt; Angebot:Rollout")
    assert _line(markdown, "Deal") == "**Deal:** Müller \\& Söhne \\&lt;b\\&gt; Angebot:Rollout"
