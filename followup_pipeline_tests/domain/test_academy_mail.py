"""What an academy's people read: a learner's reminder (e-mail and Moodle message) and the
academy owner's mail, each in German and English, in the reader's zone; their words and links."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from followup_pipeline.domain import links as signed
from followup_pipeline.domain.academy_mail import (
    MOODLE_MAX_BYTES,
    LearnerReminder,
    OwnerLine,
    Rendered,
    render_moodle_message,
    render_owner,
    render_reminder,
    why_text,
)
from followup_pipeline.domain.academy_words import Language, language_of, moment_text, zone_of

from .snapshot import match_snapshot

DUE = datetime(2026, 12, 11, 16, 0, tzinfo=UTC)
OPT_OUT = "https://links.example.org/links/opt-out/k1.AbCdEfGhIjKlMnOpQrStUv.0123456789abcdefghijABCDEFGHIJ_-"


def reminder(language: Language, action: str = "before_due", **values: object) -> LearnerReminder:
    base: dict[str, object] = {
        "academy": "Akademie Berlin" if language == "de" else "New York Academy",
        "language": language,
        "zone": "Europe/Berlin" if language == "de" else "America/Chicago",
        "learner": "Lena Fischer" if language == "de" else "Ethan Williams",
        "quiz": "Woche 1: Grundbegriffe" if language == "de" else "Week 1: <Basics> & more",
        "quiz_url": "https://moodle.example.org/mod/quiz/view.php?id=41",
        "due_at": DUE,
        "action_type": action,
        "opt_out_url": OPT_OUT,
    }
    base.update(values)
    return LearnerReminder(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("language", ["de", "en"])
def test_a_learner_reminder_reads_like_the_academy_wrote_it(language: Language) -> None:
    letter = reminder(language)
    mail = render_reminder(letter)
    match_snapshot(f"academy_reminder_{language}.html", mail.html)
    match_snapshot(f"academy_reminder_{language}.txt", f"Subject: {mail.subject}\n\n{mail.text}")
    match_snapshot(f"academy_reminder_{language}_moodle.txt", render_moodle_message(letter))
    # Its academy, its quiz and its link, when it is due in the learner's zone, the opt-out;
    # nothing internal (no key, no marker, no "ref").
    for text in (mail.text, render_moodle_message(letter)):
        assert letter.academy in text
        assert letter.quiz_url in text
        assert OPT_OUT in text
        assert "ref" not in text.split()
        assert "fu-" not in text
        assert "lms:" not in text
    assert "17:00 Uhr (MEZ)" in mail.text if language == "de" else "10:00 am (CST)" in mail.text
    if language == "en":  # the quiz's name is outside text: escaped in the HTML
        assert "Week 1: &lt;Basics&gt; &amp; more" in mail.html
        assert "<Basics>" not in mail.html


def test_an_overdue_reminder_says_the_quiz_closed_and_whom_to_ask() -> None:
    mail = render_reminder(reminder("de", "overdue"))
    assert mail.subject == "Noch offen: „Woche 1: Grundbegriffe“"
    assert "war am Freitag, 11. Dezember, 17:00 Uhr (MEZ) fällig" in mail.text
    assert "Kursleitung" in mail.text
    anonymous = render_reminder(reminder("en", "due_day", learner=None))
    assert anonymous.text.startswith("Hello,\n")
    assert anonymous.subject == "Due today: “Week 1: <Basics> & more”"


def test_a_moodle_message_fits_moodle_whatever_the_quiz_is_called() -> None:
    long = render_moodle_message(reminder("en", quiz="Q" * 6000))
    assert len(long.encode()) <= MOODLE_MAX_BYTES


def owner_mail(language: Language) -> Rendered:
    """An owner's mail of two items: a version to approve, a reminder that could not go."""
    zone = "Europe/Berlin" if language == "de" else "America/New_York"
    since = datetime(2026, 12, 7, 8, 30, tzinfo=UTC)
    when = moment_text(DUE, zone, language)
    lines = [
        OwnerLine(
            why_text(language, "publication", title="Week 2 handout", version="3", when=when),
            since,
            approve_url="https://links.example.org/links/approve/k1.A.B",
            acknowledge_url="https://links.example.org/links/acknowledge/k1.C.D",
            label=why_text(language, "label_publication", title="Week 2 handout"),
        ),
        OwnerLine(
            why_text(language, "reminder", learner="Lena Fischer", quiz="Woche 1"),
            since,
            label=why_text(language, "label_reminder", learner="Lena Fischer"),
        ),
    ]
    academy = "Akademie Berlin" if language == "de" else "New York Academy"
    return render_owner(
        academy=academy, language=language, zone=zone, lines=lines, ops="ops@example.org",
        links_until=datetime(2026, 12, 21, 8, 30, tzinfo=UTC),
    )  # fmt: skip


@pytest.mark.parametrize("language", ["de", "en"])
def test_an_academy_owner_mail_says_what_waits_and_what_they_can_do(language: Language) -> None:
    mail = owner_mail(language)
    match_snapshot(f"academy_owner_{language}.html", mail.html)
    match_snapshot(f"academy_owner_{language}.txt", f"Subject: {mail.subject}\n\n{mail.text}")
    # A subject that fits; the academy's own zone; no command line anywhere.
    assert len(mail.subject) <= 90
    assert "followup" not in mail.text
    assert "--by" not in mail.html
    if language == "en":
        assert "(EST)" in mail.text
        assert "CET" not in mail.text
    else:
        assert "Uhr (MEZ)" in mail.text


def test_languages_and_zones_fall_back_in_order() -> None:
    assert language_of("de_du", "en") == "de"
    assert language_of(None, "de") == "de"
    assert language_of("fr", "xx") == "en"
    assert zone_of("99", "America/New_York") == "America/New_York"
    assert zone_of("Nowhere/City", None) == "UTC"


def test_a_signed_link_is_bound_to_its_purpose_and_its_key() -> None:
    keys = [signed.LinkKey("new", b"n" * 32), signed.LinkKey("old", b"o" * 32)]
    id_ = signed.new_link_id()
    assert id_ != signed.new_link_id()  # random: nothing of what it is for
    token = signed.sign(keys, "approve", id_)
    assert token.startswith("new.")
    assert signed.verify(keys, "approve", token) == id_
    assert signed.verify(keys, "acknowledge", token) is None  # not for another purpose
    assert signed.verify(keys[1:], "approve", token) is None  # its key retired
    old = signed.sign(keys[1:], "approve", id_)
    assert signed.verify(keys, "approve", old) == id_  # an older key still verifies
    kid, link, mac = token.split(".")
    altered = f"{kid}.{link[:-1]}{'A' if link[-1] != 'A' else 'B'}.{mac}"
    assert signed.verify(keys, "approve", altered) is None
    assert signed.verify(keys, "approve", "") is None
    assert "academy" not in token
    assert "publish" not in token
    with pytest.raises(ValueError, match="shorter"):
        signed.parse_keys("k1:short")
