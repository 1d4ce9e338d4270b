"""Alert fingerprints: repeats of one failure match, different failures do not."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from followup_pipeline.domain.alerts import (
    AlertItem,
    alert_key,
    dead_letter_key,
    fingerprint,
    normalised,
    render_alert,
)
from followup_pipeline.domain.text import cut_at_word


def test_alerts_repeats_of_one_failure_share_a_fingerprint() -> None:
    first = fingerprint(
        "evaluate",
        "TransientError",
        "espocrm: HTTP 503 on GET Opportunity/6650a1b2c3d4e5f01 after 3 attempts"
        " (run 0c84228f-09d2-4fde-8f4f-5d302e5ee1d6 at 2026-11-30T17:28:12+00:00)\nTraceback…",
    )
    second = fingerprint(
        "evaluate",
        "TransientError",
        "espocrm: HTTP 502 on GET Opportunity/7a50b1b2c3d4e5f99 after 4 attempts"
        " (run 7945eda8-83a6-4990-a6d5-cf29bd866b32 at 2026-11-30T18:01:00Z)",
    )
    assert first == second
    assert "<id>" in first
    assert "<uuid>" in first
    assert "<time>" in first


def test_alerts_different_failures_do_not_fold_together() -> None:
    base = fingerprint("evaluate", "TransientError", "espocrm: HTTP 503")
    assert base != fingerprint("register", "TransientError", "espocrm: HTTP 503")
    assert base != fingerprint("evaluate", "StoreError", "espocrm: HTTP 503")
    assert base != fingerprint("evaluate", "TransientError", "clickup: HTTP 503")


def test_alerts_message_is_one_bounded_line() -> None:
    assert normalised("") == ""
    assert normalised("a   b\nsecond line") == "a b"
    assert len(normalised("x" * 1000)) == 200


def test_alerts_key_names_the_fingerprint_and_the_window() -> None:
    at = datetime(2026, 11, 30, 17, 28, 5, tzinfo=UTC)
    key = alert_key("run_failure", "f", at)
    assert key == alert_key("run_failure", "f", at)
    assert key != alert_key("run_failure", "g", at)
    assert key != alert_key("run_failure", "f", at + timedelta(hours=6))
    assert key.startswith("alert:run:")
    assert key.endswith(":20261130T172805")
    assert alert_key("pending_events", "f", at).startswith("alert:pending:")


def test_alerts_dead_letter_key_names_the_first_and_counts_the_rest() -> None:
    at = datetime(2026, 11, 30, 17, 28, tzinfo=UTC)
    assert dead_letter_key(["event:7"], at) == "alert:dead:event:7@20261130T172800"
    assert dead_letter_key(["event:7", "action:task:1:2"], at) == (
        "alert:dead:event:7+1@20261130T172800"
    )


def test_alerts_mail_escapes_what_it_quotes_and_says_what_to_do() -> None:
    item = AlertItem(
        kind="dead_letter",
        subject="event:7",
        message="espocrm <script>alert(1)</script> 503",
        occurred_at=datetime(2026, 3, 2, 9, 0, tzinfo=UTC),
    )
    mail = render_alert(
        [item, replace(item, subject="event:8")],
        held=0,
        held_since=None,
        ui_url="http://ui.example/",
        zone="Europe/Berlin",
    )
    assert mail.subject == "[followup] event:7 and 1 more: dead letters"
    assert "<script>" not in mail.html
    assert "&lt;script&gt;" in mail.html
    assert "event:7 at 2026-03-02 10:00 CET" in mail.markdown
    assert "followup dead-letters replay event:7 event:8" in mail.markdown
    failure = replace(item, kind="run_failure", subject="evaluate", run_id="r-1")
    held = render_alert(
        [failure],
        held=4,
        held_since=item.occurred_at,
        ui_url="http://ui.example/",
        zone="Europe/Berlin",
    )
    assert held.subject.endswith("(4 repeats held back)")
    assert "http://ui.example/runs/r-1" in held.markdown
    assert "4 repeats of this failure since 2026-03-02 10:00 CET" in held.markdown


def test_alerts_title_is_cut_at_a_word_with_an_ellipsis() -> None:
    words = "the CRM answered 503 Service Unavailable while the listing was read " * 4
    failure = AlertItem(
        kind="run_failure",
        subject="evaluate",
        message=words,
        occurred_at=datetime(2026, 3, 2, 9, 0, tzinfo=UTC),
    )
    mail = render_alert([failure], held=0, held_since=None, ui_url="http://ui", zone="UTC")
    title = mail.subject.removeprefix("[followup] evaluate: ")
    assert title.endswith("…")
    assert len(title) <= 120
    assert words.startswith(title.removesuffix("…"))
    assert words[len(title) - 1] == " "  # what was cut off began with a whole word


@pytest.mark.parametrize(
    ("text", "limit", "cut"),
    [
        ("short enough", 20, "short enough"),
        ("one two three four", 12, "one two…"),
        ("ends with a comma, then more", 19, "ends with a comma…"),
        ("Unbreakablewordwithoutspaces", 10, "Unbreakab…"),
    ],
)
def test_alerts_cut_at_word_keeps_whole_words(text: str, limit: int, cut: str) -> None:
    assert cut_at_word(text, limit) == cut
    assert len(cut_at_word(text, limit)) <= limit
