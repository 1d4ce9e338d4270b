"""Alert fingerprints: repeats of one failure match, different failures do not."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from followup_pipeline.domain.alerts import (
    MAX_NAMES_PER_MAIL,
    AlertItem,
    alert_key,
    dead_letter_digest_key,
    dead_letter_key,
    fingerprint,
    is_dead_letter_digest,
    key_stamp,
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


def test_alerts_dead_letter_keys_name_the_letter_or_the_digest_and_the_moment() -> None:
    at = datetime(2026, 11, 30, 17, 28, tzinfo=UTC)
    single = dead_letter_key(["event:7"], at)
    assert single == "alert:dead:event:7@20261130T172800"
    # Before the digests, the dead letters of one tick shared a key: the first, how many more.
    assert dead_letter_key(["event:7", "action:task:1:2"], at) == (
        "alert:dead:event:7+1@20261130T172800"
    )
    digest = dead_letter_digest_key(["event:8", "event:9", "action:task:1:2"], at)
    assert digest == "alert:dead:digest:event:8+2@20261130T172800"
    assert digest == dead_letter_digest_key(["event:8", "event:9", "action:task:1:2"], at)
    assert is_dead_letter_digest(digest)
    assert not is_dead_letter_digest(single)
    # Every dead-letter key ends in its moment, whose stamps compare as text as moments do.
    assert digest.endswith("@" + key_stamp(at))
    assert key_stamp(at - timedelta(seconds=1)) < key_stamp(at) < key_stamp(at + timedelta(days=40))


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


def test_alerts_one_dead_letter_has_a_mail_naming_it_its_step_and_error() -> None:
    item = AlertItem(
        kind="dead_letter",
        subject="event:7",
        message="espocrm Opportunity.update at step register, 5 attempts: espocrm: HTTP 503",
        occurred_at=datetime(2026, 3, 2, 9, 0, tzinfo=UTC),
    )
    mail = render_alert([item], held=0, held_since=None, ui_url="http://ui", zone="Europe/Berlin")
    assert mail.subject == "[followup] event:7: dead letter"
    assert "event:7 at 2026-03-02 10:00 CET:" in mail.markdown
    assert "at step register, 5 attempts: espocrm: HTTP 503" in mail.markdown
    assert "followup dead-letters replay event:7\n" in mail.markdown


def test_alerts_digest_counts_the_held_names_the_first_and_points_to_the_list() -> None:
    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    items = [
        AlertItem(
            kind="dead_letter",
            subject=f"event:{n}",
            message=f"espocrm Opportunity.update at step register, 5 attempts: 503 <{n}>\nmore",
            occurred_at=start + timedelta(minutes=n),
        )
        for n in range(MAX_NAMES_PER_MAIL + 7)
    ]
    total = len(items)
    mail = render_alert(
        items, held=0, held_since=None, ui_url="http://ui", zone="Europe/Berlin", digest=True
    )
    assert (
        mail.subject == f"[followup] {total} dead letters held back: event:0 and {total - 1} more"
    )
    assert f"{total} dead letters (died between 2026-03-02 10:00 CET and " in mail.markdown
    named = [n for n in range(total) if f"event:{n} at " in mail.markdown]
    assert named == list(range(MAX_NAMES_PER_MAIL))
    assert "event:0 at 2026-03-02 10:00 CET: espocrm Opportunity.update at step register" in (
        mail.markdown
    )
    # One line each: a message's further lines are left to `followup dead-letters show`.
    assert not any(line.strip() == "more" for line in mail.markdown.splitlines())
    assert "and 7 more: followup dead-letters list has them all." in mail.markdown
    assert "- Every dead letter, with its step and last error: followup dead-letters list" in (
        mail.markdown
    )
    replay = " ".join(f"event:{n}" for n in range(MAX_NAMES_PER_MAIL))
    assert f"followup dead-letters replay {replay} (and the 7 more of the list)" in mail.markdown
    assert "&lt;3&gt;" in mail.html
    assert "<3>" not in mail.html
    # A digest of one is a digest too (held past the limit, counted as such).
    one = render_alert(
        items[:1], held=0, held_since=None, ui_url="http://ui", zone="UTC", digest=True
    )
    assert one.subject == "[followup] 1 dead letter held back: event:0"
    assert "1 dead letter (died at 2026-03-02 09:00 UTC)" in one.markdown
    assert " more" not in one.markdown


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
