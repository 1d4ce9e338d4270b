"""The morning lists (the team's and a salesperson's own) and the Friday overview,
snapshot-tested on one seeded week in both languages, HTML and text: steps due today and overdue,
a deal whose cadence an e-mail reset, summaries, a closed deal; and one test for each defect a
reader found, so that it cannot come back unnoticed.

Run with ``FOLLOWUP_UPDATE_SNAPSHOTS=1`` to write the snapshots anew after a wanted change; review
the diff before committing it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from followup_pipeline.domain.report_deals import DealLine, OwnerValue, QuietDeal, WeekDeals
from followup_pipeline.domain.report_words import WORDS
from followup_pipeline.domain.reports import (
    ClosedLine,
    Health,
    Language,
    LeadCount,
    LeadWeek,
    MorningData,
    StageLine,
    StepLine,
    SummaryLine,
    WeeklyData,
    account_shown,
    has_work,
    lead_rows,
    lead_section,
    personal,
    render_morning,
    render_weekly,
)

from .snapshot import match_snapshot

CRM = "https://crm.example/#Opportunity/view/"
TASK = "https://app.clickup.com/t/"
ADA, GRACE = ("u-ada", "Ada Lovelace"), ("u-grace", "Grace Hopper")


def _step(
    deal: str,
    name: str,
    account: str | None,
    owner: tuple[str, str] | tuple[None, None],
    *,
    step: int,
    due: date,
    section: str = "today",
    amount: Decimal | None = None,
    contact: datetime | None = None,
    summary: tuple[str, str] | None = None,
    reason: str | None = None,
    task: bool = True,
    stage: str = "Proposal",
) -> StepLine:
    return StepLine(
        deal_id=deal, deal_name=name, account_name=account, owner_id=owner[0], owner=owner[1],
        stage=stage, amount=amount, currency="EUR" if amount is not None else None,
        step_no=step, step_count=3, due_on=due, section=section, crm_url=CRM + deal,
        task_url=TASK + f"t{deal}" if task else None, contact_kind="email" if contact else None,
        contact_at=contact, started_on=date(2026, 2, 20),
        summary_line1=summary[0] if summary else None,
        summary_line2=summary[1] if summary else None, reason=reason,
    )  # fmt: skip


MONDAY = date(2026, 3, 2)
MORNING = MorningData(
    day=MONDAY,
    time_zone="Europe/Berlin",
    steps=[
        _step("d1", "Bäckerei Hoffmann – Pilot", "Bäckerei Hoffmann GmbH", ADA, step=1, due=MONDAY,
              amount=Decimal("15000"),
              summary=("Kundin prüft das Angebot über 15.000 EUR.", "Bis Freitag nachfassen.")),
        # The salesperson wrote on Thursday: the cadence started again from there.
        _step("d2", "<script>alert(1)</script>", None, ADA, step=2, due=MONDAY,
              amount=Decimal("2400.50"), contact=datetime(2026, 2, 26, 15, 0, tzinfo=UTC)),
        _step("d5", "Krüger & Söhne – Rollout", "Krüger & Söhne KG", (None, None), step=1,
              due=MONDAY, stage="Negotiation"),
        # Created today, due on Friday: the machine caught up this morning; overdue all the same.
        _step("d6", "Nordwind Logistik", "Seehafen Speditions AG", GRACE, step=1,
              due=date(2026, 2, 27), amount=Decimal("48000"), section="overdue"),
        _step("d3", "Schulz AG", "Schulz AG", GRACE, step=2, due=date(2026, 2, 26),
              section="overdue", reason="paused", task=False, stage="Negotiation"),
        _step("d4", "Weber & Co", None, GRACE, step=1, due=date(2026, 2, 27), section="overdue",
              reason="crm_error", task=False),
    ],
    summaries=[
        SummaryLine("d1", "Bäckerei Hoffmann – Pilot", *ADA,
                    "Kundin prüft das Angebot über 15.000 EUR.", "Bis Freitag nachfassen.",
                    CRM + "d1"),
        SummaryLine("d7", "Hansa Kälte", *GRACE, "Einkauf wartet auf die Freigabe.",
                    "Rückmeldung für Mittwoch zugesagt.", CRM + "d7"),
    ],
    closed=[
        ClosedLine("d8", "Meyer GmbH", *GRACE, "won", datetime(2026, 2, 27, 15, 5, tzinfo=UTC)),
    ],
    review_open=2,
    health=Health(dead_letters=1, last_evaluate_ok=datetime(2026, 3, 2, 5, 0, tzinfo=UTC),
                  oldest_pending_s=180.0),
)  # fmt: skip


@pytest.mark.parametrize("language", ["de", "en"])
def test_reports_team_morning_list_matches_itsmatch_snapshot(language: Language) -> None:
    rendered = render_morning(MORNING, language)
    match_snapshot(f"morning_{language}.html", rendered.html)
    match_snapshot(f"morning_{language}.txt", f"Subject: {rendered.subject}\n\n{rendered.text}")


@pytest.mark.parametrize("language", ["de", "en"])
def test_reports_personal_morning_list_matches_itsmatch_snapshot(language: Language) -> None:
    rendered = render_morning(personal(MORNING, *GRACE), language)
    match_snapshot(f"morning_personal_{language}.html", rendered.html)
    match_snapshot(
        f"morning_personal_{language}.txt", f"Subject: {rendered.subject}\n\n{rendered.text}"
    )


def test_reports_a_personal_list_holds_only_its_owners_deals_and_no_machine_health() -> None:
    mine = personal(MORNING, *GRACE)
    assert {s.deal_id for s in mine.steps} == {"d6", "d3", "d4"}
    assert [s.deal_id for s in mine.summaries] == ["d7"]
    text = render_morning(mine, "de").text
    assert "Guten Morgen, Grace Hopper." in text
    assert "Bäckerei" not in text
    assert "Krüger" not in text
    assert "Betrieb" not in text
    assert "Prüfung" not in text
    assert render_morning(mine, "en").subject == "Your follow-ups for 2026-03-02"
    # Nothing due or overdue for someone: no list for them.
    assert not has_work(personal(MORNING, "u-nobody", "Nobody"))
    assert has_work(mine)


def test_reports_html_escapes_what_the_crm_says() -> None:
    html = render_morning(MORNING, "en").html
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Krüger &amp; Söhne KG" not in html  # the deal's name says it already
    assert "Seehafen Speditions AG" in html  # this one does not


def test_reports_morning_list_reads_as_a_list_not_as_debug_output() -> None:
    for language in ("de", "en"):
        rendered = render_morning(MORNING, language)
        html, text = rendered.html, rendered.text
        words = WORDS[language]
        # "Due today:" is a heading, said once per salesperson, not on every line.
        # (two with steps due today: Ada and the unassigned; Grace's are all overdue)
        assert text.count(words["due_today"]) == 2
        assert html.count(words["due_today"]) == 2
        # The account is named once: not when the deal's name says it already.
        # (its summary shows under its step, not again among the news)
        assert text.count("Bäckerei Hoffmann") == 1
        assert "Bäckerei Hoffmann GmbH" not in text
        # Real table headers, no bordered grid.
        assert html.count("<th align") == 6 * 3
        assert 'border="1"' not in html
        # The text part has no URL inside a sentence: links are numbered and listed at the end.
        body, _, links = text.partition(f"\n{words['links']}\n")
        assert "http" not in body
        assert re.search(r"^\[1\] https://crm\.example/#Opportunity/view/d1$", links, re.M)
        # amount, stage, last contact, task and CRM links
        assert ("15.000 EUR" if language == "de" else "15,000 EUR") in text
        assert ("2.400,50 EUR" if language == "de" else "2,400.50 EUR") in text
        assert "Negotiation" in text
        assert (
            "E-Mail am 26. Februar (vor 4 Tagen)" if language == "de"
            else "e-mail on 26 February (4 days ago)"
        ) in text  # fmt: skip
        assert f'href="{TASK}td1"' in html
        assert f'href="{CRM}d1"' in html
    # No word from the machine's insides, in either language.
    for jargon in ("Dead Letter", "dead letter", "evaluate", "überholt", "Beobachtung", "watch"):
        for language in ("de", "en"):
            rendered = render_morning(MORNING, language)
            assert jargon not in rendered.html + rendered.text, (language, jargon)


def test_reports_a_catch_up_task_created_today_is_overdue_in_the_header_and_its_row() -> None:
    """Overdue means due before the day, wherever its task was made: the header counts the
    catch-up task overdue, its row says since when, and it keeps its task's link."""
    text = render_morning(MORNING, "en").text
    assert "3 due today, 3 overdue." in text
    today, _, overdue = text.partition("Overdue (3)")
    assert "Nordwind Logistik" not in today
    assert "Nordwind Logistik" in overdue
    assert "due since 27 February" in overdue
    assert "Schulz AG" in overdue
    assert "due since 26 February: paused" in overdue
    assert f"{TASK}td6" in text


def test_reports_subject_says_late_or_preview_and_dates_are_local() -> None:
    late = render_morning(replace(MORNING, late=True), "de")
    assert late.subject == "verspätet: Follow-ups am 02.03.2026"
    assert "nachträglich versandt" in late.html
    preview = render_morning(replace(MORNING, preview=True), "de")
    assert preview.subject == "Vorschau: Follow-ups am 02.03.2026"
    assert "nicht versandt" in preview.text
    assert "nachträglich" not in preview.text
    assert render_morning(MORNING, "en").subject == "Follow-ups for 2026-03-02"
    # 15:05 UTC is 16:05 in Berlin (winter time); 05:00 UTC is 06:00, with the zone.
    text = render_morning(MORNING, "en").text
    assert "won, 2026-02-27 16:05 CET" in text
    assert "Last check against the CRM: 2026-03-02 06:00 CET" in text


def test_reports_account_shown_only_when_the_deal_name_does_not_say_it() -> None:
    assert account_shown("Bäckerei Hoffmann – Pilot", "Bäckerei Hoffmann GmbH") is None
    assert account_shown("Schulz AG", "Schulz AG") is None
    assert account_shown("Rollout 2027", "Schulz AG") == "Schulz AG"
    assert account_shown("Anything", None) is None


WEEK = WeeklyData(
    start=date(2026, 2, 28),
    end=date(2026, 3, 6),
    time_zone="Europe/Berlin",
    fired=9,
    suppressed={"superseded": 2, "deal_closed": 1},
    opened=1,
    closed={"won": 2, "lost": 1, "exhausted": 1},
    open_by_stage=[
        StageLine("Negotiation", 3, 12.3, 20),
        StageLine("<b>Proposal</b>", 7, 6.0, 15),
    ],
    failed_runs=1,
    dead_letters=0,
    tasks_per_day={
        date(2026, 3, 2): 4, date(2026, 3, 3): 2, date(2026, 3, 4): 0,
        date(2026, 3, 5): 1, date(2026, 3, 6): 2,
    },
    deals=WeekDeals(
        won=[DealLine("d8", "Meyer GmbH – Wartung", "Grace Lee", Decimal("12000"), "EUR", "won",
                      datetime(2026, 3, 3, 14, 0, tzinfo=UTC), CRM + "d8"),
             DealLine("d9", "Nordwind Logistik", "Ada Lovelace", Decimal("48000"), "EUR", "won",
                      datetime(2026, 3, 5, 9, 30, tzinfo=UTC), CRM + "d9")],
        lost=[DealLine("d10", "<i>Hansa</i> Kälte", None, None, None, "lost",
                       datetime(2026, 3, 4, 16, 0, tzinfo=UTC))],
        entered=[DealLine("d11", "Schulz AG – Rollout", "Ada Lovelace", Decimal("2400.50"), "EUR",
                          "entered", datetime(2026, 3, 2, 8, 0, tzinfo=UTC))],
        left=[DealLine("d12", "Weber & Co", "Grace Lee", Decimal("900"), "EUR", "exhausted",
                       datetime(2026, 3, 6, 6, 0, tzinfo=UTC))],
        value_by_owner=[OwnerValue("Ada Lovelace", "EUR", 4, Decimal("63400")),
                        OwnerValue("Grace Lee", "EUR", 5, Decimal("18000.5")),
                        OwnerValue(None, None, 1, None)],
        quiet=[QuietDeal("Krüger & Söhne – Rollout", None, None, date(2026, 2, 2)),
               QuietDeal("Bäckerei Hoffmann – Pilot", "Ada Lovelace",
                         datetime(2026, 2, 20, 10, 0, tzinfo=UTC), date(2026, 2, 10))],
    ),
)  # fmt: skip


@pytest.mark.parametrize("language", ["de", "en"])
def test_reports_weekly_overview_matches_itsmatch_snapshot(language: Language) -> None:
    rendered = render_weekly(WEEK, language)
    match_snapshot(f"weekly_{language}.html", rendered.html)
    match_snapshot(f"weekly_{language}.txt", f"Subject: {rendered.subject}\n\n{rendered.text}")


def test_reports_weekly_chart_is_drawn_with_table_cells_and_escapes_names() -> None:
    rendered = render_weekly(WEEK, "en")
    assert rendered.subject == "Weekly overview 2026-02-28 – 2026-03-06"
    # The busiest day gets 20 cells, the others their share; no image service.
    assert rendered.html.count('bgcolor="#4a7bd0"') == 20 + 10 + 0 + 5 + 10
    assert "<img" not in rendered.html
    assert "&lt;b&gt;Proposal&lt;/b&gt;" in rendered.html
    assert "Mon 2026-03-02 #################### 4" in rendered.text
    assert "Sat" not in rendered.text
    assert "Sun" not in rendered.text


def test_reports_weekly_overview_speaks_one_language() -> None:
    html = render_weekly(WEEK, "de").html
    assert "<th" in html
    assert ">Stage<" not in html
    assert ">Phase<" in html
    assert "Dead Letter" not in html
    assert "Beobachtung" not in html
    assert "12,3" in html  # a German decimal comma
    preview = render_weekly(replace(WEEK, preview=True, late=False), "en")
    assert preview.subject.startswith("Preview: ")
    assert "sent late" not in preview.text


def test_reports_each_list_shows_what_changed_since_its_own_last_send() -> None:
    since = {"u-grace": datetime(2026, 2, 28, 6, 30, tzinfo=UTC)}  # after Meyer was won
    data = replace(MORNING, since_by_owner=since)
    assert "Meyer GmbH" not in render_morning(personal(data, *GRACE), "en").text
    assert "Meyer GmbH" in render_morning(data, "en").text  # the team's list: never sent yet
    # Nobody to greet by name: no name, not an address.
    assert "Good morning.\n" in render_morning(personal(MORNING, "u-grace", ""), "en").text


def test_reports_lead_section_in_german_shown_only_once_leads_came() -> None:
    leads = LeadWeek(
        received=[LeadCount("site-form", 1, 2), LeadCount("crm-changes", None, 1)],
        new_people=2,
        crm={("confirmed", None): 1, ("unknown", None): 1, ("suppressed", "shadow"): 1},
        in_review=0,
        stuck={"0:classify": 1, "worker_died": 1},
        ever=True,
    )
    assert lead_rows(leads, "de") == [
        ("Eingegangene Leads", 3),
        ("Eingegangene Leads: Website-Formular", 2),
        ("Eingegangene Leads: im CRM erfasst", 1),
        ("Eingegangene Leads: Priorität 1", 2),
        ("Eingegangene Leads: nicht eingestuft", 1),
        ("Neue Personen", 2),
        ("Ins CRM geschrieben", 1),
        ("Nicht ins CRM geschrieben (Schattenbetrieb)", 1),
        ("Noch nicht ins CRM geschrieben", 1),
        ("Einstufung wartet auf Prüfung durch das Betriebsteam", 0),
        ("Hängen fest, warten auf das Betriebsteam", 2),
        ("Hängen fest bei: Einstufung", 1),
        ("Hängen fest bei: sonstiges", 1),
    ]
    rendered = render_weekly(replace(WEEK, leads=leads), "de")
    assert re.search(r'>Neue Personen</td><td align="right"[^>]*>2<', rendered.html)
    assert "Eingegangene Leads: Priorität 1: 2" in rendered.text
    # A team that never took in a lead has no section; once one came, a quiet week says so.
    nothing = LeadWeek(received=[], new_people=0, crm={}, in_review=0, stuck={}, ever=False)
    assert lead_section(nothing) is None
    assert lead_section(replace(nothing, stuck={"0:normalise": 1})) is not None
    quiet = lead_section(replace(nothing, ever=True))
    assert quiet is not None
    text = render_weekly(replace(WEEK, leads=quiet), "de").text
    assert "Leads\nKeine Leads in dieser Woche, und keiner wartet auf das Betriebsteam.\n" in text


def test_reports_the_operations_line_says_since_when_the_crm_is_unreachable() -> None:
    down = replace(
        MORNING,
        health=replace(
            MORNING.health, crm_unreachable_since=datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
        ),
    )
    text = render_morning(down, "de").text
    assert (
        "Das CRM ist seit 02.03.2026 07:00 CET nicht erreichbar; letzter vollständiger Abgleich: "
        "02.03.2026 06:00 CET. Ein fälliger Schritt wartet darauf." in text
    )
    assert "Alles läuft" not in text
    assert "Ein Vorgang wartet auf das Betriebsteam." in text  # the dead letter, still said


def test_reports_weekly_overview_names_the_weeks_deals_and_their_amounts() -> None:
    text = render_weekly(WEEK, "en").text
    assert "Won (2)\n* Meyer GmbH – Wartung (Grace Lee), 12,000 EUR, on 3 March" in text
    assert "* Nordwind Logistik (Ada Lovelace), 48,000 EUR, on 5 March" in text
    assert "Lost (1)\n* <i>Hansa</i> Kälte (Unassigned), on 4 March" in text
    assert "Left follow-up (1)\n* Weber & Co (Grace Lee), 900 EUR, every step done" in text
    assert "* Ada Lovelace: 4 deals, 63,400 EUR" in text
    assert "* Unassigned: 1 deal, —" in text
    assert (
        "Longest without contact\n* Krüger & Söhne – Rollout (Unassigned): no contact since it "
        "began on 2 February" in text
    )
    assert "Bäckerei Hoffmann – Pilot (Ada Lovelace): last contact on 20 February" in text
    # The figures and the names agree: the week's new deal, the open deals by stage and owner.
    assert "Deals newly followed up: 1" in text
    assert "Started follow-up (1)" in text
    html = render_weekly(WEEK, "de").html
    assert "&lt;i&gt;Hansa&lt;/i&gt; Kälte" in html
    assert "12.000 EUR" in html
