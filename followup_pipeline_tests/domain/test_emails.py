"""E-mails made fit for a summary, on real-looking German and English mail."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from followup_pipeline.domain.emails import (
    html_to_text,
    mail_text,
    masked,
    without_quotes,
    without_signature,
)

GERMAN_REPLY = """\
Hallo Herr Becker,

vielen Dank für das Angebot. Wir würden gerne mit 25 Lizenzen starten.
Können Sie uns bis Freitag eine angepasste Version schicken?

Mit freundlichen Grüßen
Julia Hoffmann
Einkauf | Bäckerei Hoffmann GmbH
Tel. +49 89 123456-0

Am 12.03.2026 um 09:14 schrieb Thomas Becker <t.becker@vertrieb.example>:
> Sehr geehrte Frau Hoffmann,
> anbei unser Angebot über 18.500 EUR.
"""

ENGLISH_REPLY = """\
Hi Tom,

Thanks - legal signed off. We can go ahead with the pilot in April.

Best regards,
Sarah
--
Sarah Miller | Head of Operations
ACME Ltd., 1 Main Street, London

On Tue, Mar 10, 2026 at 4:02 PM Tom Becker <tom@vendor.example> wrote:
> Hi Sarah, any news from legal?
"""

OUTLOOK_REPLY = """\
Guten Morgen,

der Termin am Donnerstag passt uns.

________________________________
Von: Thomas Becker <t.becker@vertrieb.example>
Gesendet: Montag, 9. März 2026 17:30
An: Julia Hoffmann
Betreff: Termin

Hallo Frau Hoffmann, passt Ihnen Donnerstag?
"""

OUTLOOK_ENGLISH = """\
Works for us, please send the contract.

-----Original Message-----
From: Tom Becker
Sent: Monday, March 9, 2026 5:30 PM
Subject: Contract

Shall I send the contract?
"""

HTML_MAIL = """\
<html><head><style>p {color: red}</style><title>x</title></head><body>
<p>Hallo Herr Becker,</p><p>wir haben <b>eine Frage</b> zum Angebot &amp; zur Lieferung.</p>
<div>Bis bald<br>Julia</div><script>track()</script>
</body></html>"""


def test_emails_german_reply_keeps_the_new_part_only() -> None:
    text = without_signature(without_quotes(GERMAN_REPLY))
    assert "25 Lizenzen" in text
    assert "bis Freitag" in text
    assert "Mit freundlichen Grüßen" not in text
    assert "Einkauf" not in text  # the signature
    assert "18.500" not in text  # the quoted offer
    assert "schrieb" not in text


def test_emails_english_reply_drops_signature_and_quote() -> None:
    text = without_signature(without_quotes(ENGLISH_REPLY))
    assert text.strip().endswith("pilot in April.")
    assert "Head of Operations" not in text
    assert "any news from legal" not in text


@pytest.mark.parametrize(
    ("mail", "kept", "dropped"),
    [
        (OUTLOOK_REPLY, "der Termin am Donnerstag passt uns.", "passt Ihnen Donnerstag"),
        (OUTLOOK_ENGLISH, "Works for us, please send the contract.", "Shall I send"),
    ],
)
def test_emails_outlook_quoted_blocks_are_cut(mail: str, kept: str, dropped: str) -> None:
    text = without_quotes(mail)
    assert kept in text
    assert dropped not in text
    assert "Betreff" not in text


def test_emails_html_becomes_the_text_a_reader_sees() -> None:
    text = html_to_text(HTML_MAIL)
    assert "wir haben eine Frage zum Angebot & zur Lieferung." in text
    assert "color" not in text  # style
    assert "track()" not in text  # script
    assert "Bis bald\nJulia" in text


def test_emails_personal_data_is_masked() -> None:
    text = masked(
        "Rufen Sie an: +49 (0)30 1234-5678, mobil 0171 9876543, oder 0049 89 1234567. "
        "IBAN DE89 3704 0044 0532 0130 00 / GB82WEST12345698765432, "
        "Mail an julia.hoffmann+angebot@baeckerei-hoffmann.example. "
        "Angebot über 15.000 EUR vom 12.03.2026, 25 Lizenzen, 20 %."
    )
    for secret in ("1234-5678", "9876543", "1234567", "DE89", "GB82", "julia.hoffmann"):
        assert secret not in text, text
    assert text.count("[phone]") == 3
    assert text.count("[IBAN]") == 2
    assert "[e-mail]" in text
    # Amounts, dates, counts and percentages stay: the summary may quote them.
    for kept in ("15.000 EUR", "12.03.2026", "25 Lizenzen", "20 %"):
        assert kept in text, text


def test_emails_mail_text_trims_masks_then_caps() -> None:
    mail = mail_text(
        sent_at=datetime(2026, 3, 12, 9, 0, tzinfo=UTC),
        sender="Julia Hoffmann <julia@kunde.example>",
        subject="Re: Angebot",
        body=GERMAN_REPLY,
        is_html=False,
        max_chars=60,
        mask=True,
    )
    assert mail.sender == "Julia Hoffmann <[e-mail]>"
    assert len(mail.body) == 60
    assert mail.body.endswith("…")
    assert mail.body.startswith("Hallo Herr Becker,")
    unmasked = mail_text(
        sent_at=None, sender=None, subject=None, body="a@b.example", is_html=False,
        max_chars=100, mask=False,
    )  # fmt: skip
    assert (unmasked.body, unmasked.sender) == ("a@b.example", "unknown")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DE89\u00a03704\u00a00044\u00a00532\u00a00130\u00a000", "[IBAN]"),
        ("DE89 370 400 440 532 013 000", "[IBAN]"),
        ("de89 3704 0044 0532 0130 00", "[IBAN]"),
        ("DE89-3704-0044-0532-0130-00", "[IBAN]"),
        ("DE 89 3704 0044 0532 0130 00", "[IBAN]"),
        ("Tel.030 1234567", "Tel.[phone]"),
        ("(555) 123-4567", "[phone]"),
        ("+49 (0)30 1234-5678", "[phone]"),
        ("am 05.04.2026 und 01.12.2026", "am 05.04.2026 und 01.12.2026"),
        ("Rechnung vom 2026-04-05", "Rechnung vom 2026-04-05"),
        ("ab 12 Stück bis Freitag", "ab 12 Stück bis Freitag"),
    ],
)
def test_emails_masking_variants(text: str, expected: str) -> None:
    assert masked(text) == expected
