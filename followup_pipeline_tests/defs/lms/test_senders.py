"""The vendor part of the three learning-reminder senders alone (look up, perform after its touch,
read back) against the sandbox's Moodle, Graph and Accredible, and a 2xx that breaks its schema
behind ``httpx.MockTransport``: no Dagster, no engine."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import date
from typing import Any

import httpx
import pytest

from followup_pipeline.defs.lms.credential_export import (
    NO_ADDRESS,
    CertificateBook,
    CredentialExport,
)
from followup_pipeline.defs.lms.module_publication import ContentBook, ModulePublication
from followup_pipeline.defs.lms.reminder_delivery import (
    Letters,
    MailReminder,
    MoodleReminder,
    ReminderBook,
    marker,
)
from followup_pipeline.domain.links import LinkKey
from followup_pipeline.engine.effects import ActionSpec, Kind
from followup_pipeline.integrations.accredible import AccredibleClient
from followup_pipeline.integrations.errors import PermanentError, TransientError
from followup_pipeline.integrations.moodle import MoodleClient
from followup_pipeline.integrations.outlook import OutlookClient
from followup_pipeline.resources import PostgresResource
from followup_pipeline.store import lms
from followup_pipeline.store.lms import DueRow, Tenant
from followup_pipeline.store.lms_certificates import CertificateRow
from followup_pipeline.store.lms_content import ContentRow

from .lms_world import BERLIN, SANDBOX, TOKENS, control, seed_site, utc

NOW = utc(2026, 3, 9, 8, 5)
ZONE = "Europe/Berlin"
KEYS = [LinkKey("test", b"k" * 32)]
#: What the sandbox holds, by kind: where it is listed, and under which name.
LISTS = {
    "messages": (f"/moodle/{BERLIN}/messages", "messages"),
    "mails": ("/outbox", "messages"),
    "credentials": ("/accredible/credentials", "credentials"),
}


@pytest.fixture(scope="module")
def records(database_factory: Callable[..., str], template_name: str) -> PostgresResource:
    """One database for the module: a sender's record of its attempt (of a row that is not
    there: nothing changes) and its reminder's opt-out link are all it writes before its
    request; the academy is there for the link."""
    resource = PostgresResource(url=database_factory(template_name))
    with resource.connection() as conn, conn.transaction():
        lms.save_tenant(conn, _tenant("http://moodle.test"))
    return resource


def _tenant(base: str) -> Tenant:
    return Tenant(id=BERLIN, name="Akademie Berlin", moodle_url=f"{base}/moodle/{BERLIN}",
                  token_ref="ACADEMY_BERLIN", time_zone=ZONE, language="de",
                  sender="followup@example.com")  # fmt: skip


def _letters(records: PostgresResource, base: str) -> Letters:
    return Letters(records, _tenant(base), KEYS, "http://links.test", NOW)


@pytest.fixture
def site(sandbox: str) -> Iterator[MoodleClient]:
    """The Berlin academy's Moodle in the sandbox."""
    with closing(MoodleClient(f"{sandbox}/moodle/{BERLIN}", TOKENS["ACADEMY_BERLIN"])) as client:
        yield client


def _held(sandbox: str, kind: str) -> list[dict[str, Any]]:
    path, name = LISTS[kind]
    listed: list[dict[str, Any]] = control(sandbox, "GET", path)[name]
    return listed


def _touch(log: list[str], sandbox: str, kind: str) -> Callable[[], None]:
    """A touch that notes how many of ``kind`` the vendor held when it came."""
    return lambda: log.append(f"touch: {len(_held(sandbox, kind))} {kind}")


def _spec(key: str, kind: Kind) -> ActionSpec:
    return ActionSpec(key=key, kind=kind, due_at=NOW, time_zone=ZONE)


def _reminder(seeded: dict[str, Any], email: str | None, learner: int | None = None) -> DueRow:
    user = seeded["users"][0] if learner is None else learner
    return DueRow(
        id=0, tenant_id=BERLIN, learner_id=user, assignment_id=seeded["quiz"],
        action_type="before_due", due_at=NOW, time_zone=ZONE, local_day=date(2026, 3, 9),
        idempotency_key=f"lms:{BERLIN}:{user}:{seeded['quiz']}:before_due:2026-03-09",
        delivery_outcome="planned", course_id=seeded["course"], coursemodule=0,
        learner_name="Ada <Lovelace>", learner_email=email, quiz_name="Safety & quiz",
        quiz_due_at=utc(2026, 3, 11, 16), completed_at=None,
    )  # fmt: skip


def _certificate(email: str | None) -> CertificateRow:
    return CertificateRow(
        tenant_id=BERLIN, learner_id=31, course_id=7, group_id=9549, learner_name="Ada",
        learner_email=email, completed_at=NOW, generation=1,
        idempotency_key=f"lms-cert:{BERLIN}:31:7:1", state="missing", reason=None,
        credential_id=None, confirmed_at=None, lost_at=None, seen_at=NOW,
    )  # fmt: skip


def test_reminder_by_moodle_message_is_looked_up_by_its_marker_and_read_back(
    records: PostgresResource, sandbox: str, site: MoodleClient
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=1)
    row = _reminder(seeded, None)
    book = ReminderBook(records, NOW, Counter())
    sender, spec = (
        MoodleReminder(row, _letters(records, sandbox), book, site),
        _spec(row.idempotency_key, "reminder"),
    )
    assert sender.look_up(spec) is None
    log: list[str] = []
    ref = sender.perform(spec, _touch(log, sandbox, "messages"))
    assert log == ["touch: 0 messages"]
    [sent] = _held(sandbox, "messages")
    # Nothing internal in what the learner reads: the key's marker goes as its clientmsgid,
    # and the message is found by its opt-out link (the learner's own, in German).
    assert marker(row.idempotency_key) not in sent["fullmessage"]
    assert sent["clientmsgid"] == marker(row.idempotency_key)
    assert "„Safety & quiz“ ist am Mittwoch, 11. März fällig" in sent["fullmessage"]
    assert f"/mod/quiz/view.php?id={row.coursemodule}" in sent["fullmessage"]
    assert "http://links.test/links/opt-out/" in sent["fullmessage"]
    assert (sender.look_up(spec), sender.read_back(spec, ref)) == (ref, True)
    assert book.counts == Counter({"reminders_attempted": 1})
    # A learner who takes messages from contacts only: Moodle refuses (msgid -1), no doubt.
    closed = {"firstname": "C", "lastname": "L", "course": seeded["course"],
              "email": "c@example.com", "messaging": "onlycontacts"}  # fmt: skip
    [user] = control(sandbox, "POST", f"/moodle/{BERLIN}/users", [closed])["users"]
    refused = MoodleReminder(
        _reminder(seeded, None, user["id"]), _letters(records, sandbox), book, site
    )
    with pytest.raises(PermanentError, match="refused"):
        refused.perform(_spec(refused.row.idempotency_key, "reminder"), lambda: None)


def test_reminder_by_mail_carries_its_key_to_the_mailbox_and_is_found_there(
    records: PostgresResource, sandbox: str
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=1)
    mailbox = OutlookClient(
        f"{sandbox}/login", f"{sandbox}/graph", SANDBOX.graph_tenant_id, SANDBOX.graph_client_id,
        SANDBOX.graph_client_secret.get_secret_value(), "followup@example.com",
    )  # fmt: skip
    book = ReminderBook(records, NOW, Counter())
    row = _reminder(seeded, "ada@example.com")
    sender, spec = (
        MailReminder(row, _letters(records, sandbox), book, mailbox),
        _spec(row.idempotency_key, "reminder"),
    )
    with closing(mailbox):
        assert sender.look_up(spec) is None
        log: list[str] = []
        sender.perform(spec, _touch(log, sandbox, "mails"))
        assert log == ["touch: 0 mails"]
        [mail] = [m["message"] for m in _held(sandbox, "mails")]
        assert mail["toRecipients"][0]["emailAddress"]["address"] == "ada@example.com"
        assert "<p>Hallo Ada &lt;Lovelace&gt;,</p>" in mail["body"]["content"]
        assert "Hallo Ada <Lovelace>," in mail["textBody"]  # plain text, as written
        headers = {h["name"]: h["value"] for h in mail["internetMessageHeaders"]}
        assert headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        assert headers["List-Unsubscribe"].startswith("<http://links.test/links/opt-out/")
        assert headers["X-Followup-Key"] == row.idempotency_key  # in a header, never the text
        assert row.idempotency_key not in mail["textBody"] + mail["body"]["content"]
        assert sender.look_up(spec) is not None
        assert sender.read_back(spec, None) is True
        # No address: the attempt fails before its touch, and nothing is sent.
        nowhere = MailReminder(_reminder(seeded, None), _letters(records, sandbox), book, mailbox)
        with pytest.raises(PermanentError, match="no e-mail address"):
            nowhere.perform(spec, _touch(log, sandbox, "mails"))
        assert (len(_held(sandbox, "mails")), log) == (1, ["touch: 0 mails"])


def test_credential_export_is_created_under_our_id_looked_up_and_read_back_by_it(
    records: PostgresResource, sandbox: str
) -> None:
    platform = AccredibleClient(f"{sandbox}/accredible", TOKENS["ACADEMY_BERLIN_CREDENTIALS"])
    row = _certificate("ada@example.com")
    export = CredentialExport(row, platform, CertificateBook(records, NOW, Counter()))
    spec = _spec(row.idempotency_key, "certificate")
    with closing(platform):
        assert export.look_up(spec) is None
        log: list[str] = []
        ref = export.perform(spec, _touch(log, sandbox, "credentials"))
        assert log == ["touch: 0 credentials"]
        [made] = _held(sandbox, "credentials")
        assert (made["license_id"], made["recipient_email"]) == (spec.key, "ada@example.com")
        assert (export.look_up(spec), export.read_back(spec, ref)) == (ref, True)
        assert export.read_back(spec, None) is None  # no id: nothing to read
        nowhere = CredentialExport(_certificate(None), platform, export.book)
        with pytest.raises(PermanentError, match=NO_ADDRESS):
            nowhere.perform(spec, _touch(log, sandbox, "credentials"))
        assert (len(_held(sandbox, "credentials")), log) == (1, ["touch: 0 credentials"])


def test_module_publication_shows_the_module_and_reads_it_back_visible(
    records: PostgresResource, sandbox: str, site: MoodleClient
) -> None:
    seeded = seed_site(sandbox, BERLIN, utc(2026, 3, 11, 16), learners=0)
    [module] = control(sandbox, "POST", f"/moodle/{BERLIN}/modules",
                       {"course": seeded["course"], "name": "Week 1"})["modules"]  # fmt: skip
    tenant = Tenant(id=BERLIN, name=BERLIN, moodle_url="", token_ref="", time_zone=ZONE)
    row = ContentRow(
        tenant_id=BERLIN, content_id="week-1", version=1, title="Week 1",
        course_id=seeded["course"], cmid=module["id"], publish_at=NOW, approved_by="Dana",
        approved_at=NOW, state="waiting", reason=None, idempotency_key="lms-publish:x:week-1:v1",
        published_at=None, created_at=NOW, current_version=1,
    )  # fmt: skip
    publication = ModulePublication(row, site, ContentBook(records, tenant, NOW, Counter()))
    spec = _spec(row.idempotency_key, "publication")

    def shown() -> str:
        modules = control(sandbox, "GET", f"/moodle/{BERLIN}")["modules"]
        return f"touch: {sum(m['visible'] for m in modules)} shown"

    assert (publication.look_up(spec), publication.read_back(spec, None)) == (None, False)
    log: list[str] = []
    ref = publication.perform(spec, lambda: log.append(shown()))
    assert (log, shown()) == (["touch: 0 shown"], "touch: 1 shown")
    assert (publication.look_up(spec), publication.read_back(spec, ref)) == (ref, True)
    assert ref == str(module["id"])


def _answering(answer: Any) -> httpx.MockTransport:
    """A vendor that takes every request and answers 200 with ``answer``."""
    return httpx.MockTransport(lambda request: httpx.Response(200, json=answer))


def test_a_create_whose_answer_breaks_its_schema_may_have_been_made(
    records: PostgresResource,
) -> None:
    moodle = MoodleClient("http://moodle.test", "t", transport=_answering([{"msgid": "x"}]))
    row = _reminder({"users": [31], "quiz": 5, "course": 7}, None)
    letters = _letters(records, "http://moodle.test")
    message = MoodleReminder(row, letters, ReminderBook(records, NOW, Counter()), moodle)
    platform = AccredibleClient("http://accredible.test", "k", transport=_answering({"id": 1}))
    export = CredentialExport(
        _certificate("a@b.c"), platform, CertificateBook(records, NOW, Counter())
    )
    senders: list[tuple[MoodleReminder | CredentialExport, Kind]] = [
        (message, "reminder"), (export, "certificate")
    ]  # fmt: skip
    for sender, kind in senders:
        with pytest.raises(TransientError) as raised:
            sender.perform(_spec("k", kind), lambda: None)
        assert raised.value.ambiguous, kind
