"""Every word a learner, an academy's owner and a person clicking a link read, in German and
English: written as the academy would write it, with nothing of the machine's insides (no keys,
no job names, no commands)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo

Language = Literal["de", "en"]
LANGUAGES: tuple[Language, ...] = ("de", "en")

WORDS: dict[Language, dict[str, str]] = {
    "de": {
        # a learner's reminder
        "subject_before_due": "Erinnerung: „{quiz}“ ist am {due_day} fällig",
        "subject_due_day": "Heute fällig: „{quiz}“",
        "subject_overdue": "Noch offen: „{quiz}“",
        "hello": "Hallo {name},",
        "hello_anon": "Hallo,",
        "lead_before_due": "der Test „{quiz}“ in {academy} ist bald fällig: {due}.",
        "lead_due_day": "der Test „{quiz}“ in {academy} ist heute fällig: {due}.",
        "lead_overdue": "der Test „{quiz}“ in {academy} war am {due} fällig und ist noch offen.",
        "lead_no_due": "der Test „{quiz}“ in {academy} ist noch offen.",
        "open_quiz": "Zum Test",
        "miss_open": "Danach schließt der Test; wer ihn verpasst, kann ihn nicht mehr ablegen "
        "und muss sich an die Kursleitung wenden.",
        "miss_overdue": "Der Test ist geschlossen. Wenn Sie ihn noch ablegen müssen, wenden Sie "
        "sich bitte an die Kursleitung.",
        "closing": "Viele Grüße\n{academy}",
        "why": "Sie erhalten diese Erinnerung, weil Sie in einem Kurs von {academy} "
        "eingeschrieben sind.",
        "opt_out": "Keine Erinnerungen mehr erhalten",
        "moodle_short": "{lead} {miss} Zum Test: {quiz_url} — Keine Erinnerungen mehr: "
        "{opt_out_url}",
        # an academy owner's mail
        "owner_subject_1": "{academy}: {what}",
        "owner_subject_n": "{academy}: {what} (und {more} weitere)",
        "why_label_publication": "„{title}“ wartet auf Ihre Freigabe",
        "why_label_reminder": "eine Erinnerung an {learner} ging nicht hinaus",
        "why_label_certificate": "ein Zertifikat für {learner} fehlt",
        "why_label_other": "etwas wartet auf Sie",
        "owner_hello": "Guten Tag,",
        "owner_lead": "bei den Lernerinnerungen von {academy} wartet etwas auf Sie:",
        "owner_approve": "Freigeben",
        "owner_acknowledge": "Gesehen – ich kümmere mich",
        "owner_ask": "Fragen dazu beantwortet {ops}.",
        "owner_ask_anon": "Fragen dazu beantwortet das Betriebsteam.",
        "owner_when": "Wartet seit {when}.",
        "owner_link_note": "Die Schaltflächen fragen vor jeder Änderung noch einmal nach. "
        "Jede gilt einmal, bis {until}.",
        "owner_footer": "Diese Nachricht geht an die Verantwortlichen von {academy}.",
        "why_reminder": "Eine Erinnerung an {learner} zu „{quiz}“ konnte nicht zugestellt werden.",
        "why_certificate": "Ein Zertifikat für {learner} konnte nicht ausgestellt werden.",
        "why_publication": "Der Inhalt „{title}“ (Version {version}) soll am {when} "
        "veröffentlicht werden und ist noch nicht freigegeben.",
        "why_publication_late": "Der Inhalt „{title}“ (Version {version}) konnte noch nicht "
        "veröffentlicht werden.",
        "why_other": "{what}",
        # the weekly mail
        "weekly_subject": "Lernerinnerungen von {academy}, Woche {week}: {sent} versandt, "
        "{overdue} überfällig",
        "weekly_title": "Lernerinnerungen von {academy}, Woche {week}",
        "weekly_overdue": "Überfällig (fällig, nicht erledigt)",
        "weekly_failures": "Nicht zustellbar (abgelehnt oder unklar)",
        "weekly_superseded": "Übersprungen (von einer späteren Erinnerung abgelöst)",
        "weekly_opted_out": "Abbestellt",
        "weekly_completed": "Vor der Erinnerung erledigt",
        "weekly_expired": "Verfallen (mehr als 7 Tage überfällig)",
        "weekly_sent": "Versandt",
        "weekly_confirmed": "Zugestellt bestätigt",
        "weekly_planned": "Geplant",
        "weekly_queued": "Warten auf Sie",
        "weekly_mode_dry": "Probebetrieb: nichts wurde wirklich versandt.",
        "weekly_zone": "Gezählt über die 7 Tage bis {until}; überfällig und geplant: wie es "
        "jetzt steht.",
        # a link's page
        "page_opt_out_ask": "Keine Erinnerungen von {academy} mehr erhalten?",
        "page_opt_out_button": "Ja, abbestellen",
        "page_opt_out_done": "Erledigt: Sie erhalten keine Erinnerungen von {academy} mehr.",
        "page_approve_ask": "Den Inhalt „{title}“ (Version {version}) von {academy} freigeben?",
        "page_approve_button": "Freigeben",
        "page_approve_done": "Freigegeben: „{title}“ (Version {version}) wird zum geplanten "
        "Zeitpunkt veröffentlicht.",
        "page_acknowledge_ask": "Bestätigen, dass Sie sich um diese Sache kümmern?",
        "page_acknowledge_button": "Bestätigen",
        "page_acknowledge_done": "Bestätigt. Danke.",
        "page_already": "Das ist bereits erledigt.",
        "page_expired": "Dieser Link ist abgelaufen.",
        "page_superseded": "Es gibt inzwischen eine neuere Version; dieser Link gilt nicht mehr.",
        "page_unknown": "Dieser Link ist ungültig.",
        "page_too_large": "Diese Anfrage ist zu groß.",
        "page_busy": "Das hat gerade nicht geklappt. Bitte versuchen Sie es in einer Minute "
        "noch einmal.",
    },
    "en": {
        "subject_before_due": "Reminder: “{quiz}” is due on {due_day}",
        "subject_due_day": "Due today: “{quiz}”",
        "subject_overdue": "Still open: “{quiz}”",
        "hello": "Hello {name},",
        "hello_anon": "Hello,",
        "lead_before_due": "the quiz “{quiz}” at {academy} is due soon: {due}.",
        "lead_due_day": "the quiz “{quiz}” at {academy} is due today: {due}.",
        "lead_overdue": "the quiz “{quiz}” at {academy} was due on {due} and is still open.",
        "lead_no_due": "the quiz “{quiz}” at {academy} is still open.",
        "open_quiz": "Open the quiz",
        "miss_open": "The quiz closes then; if you miss it, you can no longer take it and "
        "need to ask your course's teacher.",
        "miss_overdue": "The quiz has closed. If you still need to take it, please ask your "
        "course's teacher.",
        "closing": "Best regards,\n{academy}",
        "why": "You receive this reminder because you are enrolled in a course of {academy}.",
        "opt_out": "Stop these reminders",
        "moodle_short": "{lead} {miss} Open the quiz: {quiz_url} — Stop these reminders: "
        "{opt_out_url}",
        "owner_subject_1": "{academy}: {what}",
        "owner_subject_n": "{academy}: {what} (and {more} more)",
        "why_label_publication": "“{title}” waits for your approval",
        "why_label_reminder": "a reminder to {learner} did not go out",
        "why_label_certificate": "a certificate for {learner} is missing",
        "why_label_other": "something waits for you",
        "owner_hello": "Hello,",
        "owner_lead": "the learning reminders of {academy} have something waiting for you:",
        "owner_approve": "Approve",
        "owner_acknowledge": "Seen – I'll take care of it",
        "owner_ask": "For questions, ask {ops}.",
        "owner_ask_anon": "For questions, ask the operations team.",
        "owner_when": "Waiting since {when}.",
        "owner_link_note": "Each button asks once more before it changes anything. They work "
        "once, until {until}.",
        "owner_footer": "This message goes to the people responsible for {academy}.",
        "why_reminder": "A reminder to {learner} about “{quiz}” could not be delivered.",
        "why_certificate": "A certificate for {learner} could not be issued.",
        "why_publication": "The content “{title}” (version {version}) is to be published on "
        "{when} and is not approved yet.",
        "why_publication_late": "The content “{title}” (version {version}) could not be "
        "published yet.",
        "why_other": "{what}",
        "weekly_subject": "Learning reminders of {academy}, week {week}: {sent} sent, "
        "{overdue} overdue",
        "weekly_title": "Learning reminders of {academy}, week {week}",
        "weekly_overdue": "Overdue (due, not settled)",
        "weekly_failures": "Not delivered (refused or unclear)",
        "weekly_superseded": "Skipped (overtaken by a later reminder)",
        "weekly_opted_out": "Opted out",
        "weekly_completed": "Completed before the reminder",
        "weekly_expired": "Expired (due more than 7 days ago)",
        "weekly_sent": "Sent",
        "weekly_confirmed": "Delivery confirmed",
        "weekly_planned": "Planned",
        "weekly_queued": "Waiting for you",
        "weekly_mode_dry": "Trial mode: nothing was really sent.",
        "weekly_zone": "Counted over the 7 days up to {until}; overdue and planned: as they "
        "stand now.",
        "page_opt_out_ask": "Stop receiving reminders from {academy}?",
        "page_opt_out_button": "Yes, stop them",
        "page_opt_out_done": "Done: you will receive no more reminders from {academy}.",
        "page_approve_ask": "Approve the content “{title}” (version {version}) of {academy}?",
        "page_approve_button": "Approve",
        "page_approve_done": "Approved: “{title}” (version {version}) will be published as "
        "planned.",
        "page_acknowledge_ask": "Confirm that you are taking care of this?",
        "page_acknowledge_button": "Confirm",
        "page_acknowledge_done": "Confirmed. Thank you.",
        "page_already": "This is done already.",
        "page_expired": "This link has expired.",
        "page_superseded": "There is a newer version now; this link no longer applies.",
        "page_unknown": "This link is not valid.",
        "page_too_large": "This request is too large.",
        "page_busy": "That did not work just now. Please try again in a minute.",
    },
}
MONTHS: dict[Language, tuple[str, ...]] = {
    "de": ("Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August",
           "September", "Oktober", "November", "Dezember"),
    "en": ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"),
}  # fmt: skip
WEEKDAYS: dict[Language, tuple[str, ...]] = {
    "de": ("Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag"),
    "en": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
}


def language_of(*wanted: str | None) -> Language:
    """The first of ``wanted`` (a learner's Moodle ``lang``, the academy's) we write in, by its
    primary subtag (``de_du``: German); English when none is."""
    for code in wanted:
        primary = (code or "").replace("-", "_").split("_")[0].lower()
        if primary in LANGUAGES:
            return "de" if primary == "de" else "en"
    return "en"


def zone_of(*wanted: str | None) -> str:
    """The first of ``wanted`` that is a time zone (a learner's, the academy's); else UTC."""
    for name in wanted:
        if name and name != "99":
            try:
                ZoneInfo(name)
            except (ValueError, KeyError, OSError):
                continue
            return name
    return "UTC"


def day_text(instant: datetime, zone: str, language: Language) -> str:
    """A day as people write it: ``Freitag, 11. Dezember`` / ``Friday, 11 December``."""
    local = instant.astimezone(ZoneInfo(zone))
    weekday, month = WEEKDAYS[language][local.weekday()], MONTHS[language][local.month - 1]
    if language == "de":
        return f"{weekday}, {local.day}. {month}"
    return f"{weekday}, {local.day} {month}"


def moment_text(instant: datetime, zone: str, language: Language) -> str:
    """A moment as people write it, with its zone: ``Freitag, 11. Dezember, 17:00 Uhr (MEZ)``,
    ``Friday, 11 December, 5:00 pm (EST)``."""
    local = instant.astimezone(ZoneInfo(zone))
    day = day_text(instant, zone, language)
    abbreviation = local.tzname() or zone
    if language == "de":
        german = {"CET": "MEZ", "CEST": "MESZ"}.get(abbreviation, abbreviation)
        return f"{day}, {local:%H:%M} Uhr ({german})"
    hour = local.hour % 12 or 12
    return f"{day}, {hour}:{local:%M} {'am' if local.hour < 12 else 'pm'} ({abbreviation})"
