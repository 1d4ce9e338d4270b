"""Demo data: deals in every stage with German and English e-mails, calls and meetings."""

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from followup_pipeline.sandbox.config import DEFAULT_STAGES

_COMPANIES = [
    ("Müller Maschinenbau GmbH", "de"),
    ("Schäfer Logistik AG", "de"),
    ("Bäckerei Hoffmann", "de"),
    ("Krüger & Söhne KG", "de"),
    ("Stadtwerke Weißenfels", "de"),
    ("Nordlicht Energie GmbH", "de"),
    ("Alpenblick Hotels", "de"),
    ("Fischer Medizintechnik", "de"),
    ("Acme Robotics Ltd", "en"),
    ("Blue Harbor Foods", "en"),
    ("Northwind Traders", "en"),
    ("Crescent Analytics", "en"),
    ("Evergreen Clinics", "en"),
    ("Summit Outdoor Co.", "en"),
    ("Pioneer Freight", "en"),
    ("Lumen Software", "en"),
]
_PRODUCTS = [
    "Wartungsvertrag",
    "Cloud-Migration",
    "Lizenzpaket",
    "Rollout",
    "Pilotprojekt",
    "Support",
]
_PEOPLE = [
    ("Anna Schmidt", "anna.schmidt"),
    ("Jonas Weber", "jonas.weber"),
    ("Emily Carter", "emily.carter"),
    ("Liam O'Brien", "liam.obrien"),
]
#: The demo's salespeople: CRM user id, name, ClickUp user id, and where their own morning
#: list goes (``example.com`` reaches nobody: the sandbox's outbox).
SALESPEOPLE = [
    ("5f1a0c2b3d4e5f601", "Sabine Vogel", 81001, "sabine.vogel@example.com"),
    ("5f1a0c2b3d4e5f602", "Tom Becker", 81002, "tom.becker@example.com"),
    ("5f1a0c2b3d4e5f603", "Grace Lee", 81003, "grace.lee@example.com"),
]
_USERS = [(user_id, name) for user_id, name, _, _ in SALESPEOPLE]
_MAILS = {
    "de": [
        (
            "Angebot {deal}",
            "vielen Dank für das Gespräch. Anbei unser Angebot über {amount} EUR. "
            "Wir freuen uns auf Ihre Rückmeldung.",
        ),
        (
            "Re: Angebot {deal}",
            "Danke für das Angebot. Wir prüfen es intern und melden uns bis "
            "Ende der Woche. Die Geschäftsführung möchte noch die Laufzeit klären.",
        ),
        (
            "Rückfrage zur Lieferzeit",
            "Können Sie die Lieferung auf den Monatsanfang vorziehen? "
            "Das wäre für unsere Planung wichtig.",
        ),
        (
            "Nachfrage",
            "ich wollte kurz nachhaken, ob Sie unser Angebot schon prüfen konnten. "
            "Gerne stehe ich für Fragen zur Verfügung.",
        ),
    ],
    "en": [
        (
            "Proposal {deal}",
            "Thanks for the call today. Please find attached our proposal for "
            "{amount} EUR. Let me know if anything is unclear.",
        ),
        (
            "Re: Proposal {deal}",
            "Thank you for the proposal. Our procurement team will review it "
            "next week. We may ask for a discount on the second year.",
        ),
        (
            "Question about onboarding",
            "Could you share the onboarding plan and the timeline? "
            "We want to start before the end of the quarter.",
        ),
        (
            "Checking in",
            "Just checking in on the proposal we sent. Happy to set up a call with "
            "your team/finance if that helps.",
        ),
    ],
}


def _email(
    rng: random.Random,
    lang: str,
    deal: str,
    amount: float,
    sent: datetime,
    sender: str,
    customer: str,
) -> dict[str, Any]:
    subject, body = rng.choice(_MAILS[lang])
    greeting = "Sehr geehrte Damen und Herren," if lang == "de" else "Hello,"
    text = f"{greeting}\n{body.format(amount=f'{amount:,.0f}')}"
    inbound = rng.random() < 0.5
    return {
        "subject": subject.format(deal=deal),
        "fromAddress": customer if inbound else sender,
        "to": sender if inbound else customer,
        "dateSent": sent.strftime("%Y-%m-%d %H:%M:%S"),
        "status": "Archived" if inbound else "Sent",
        "body": text,
        "bodyPlain": text,
        "isHtml": False,
    }


def email_about(rng: random.Random, deal: dict[str, Any], sent: datetime) -> dict[str, Any]:
    """A new e-mail about ``deal`` (German for German companies), sent at ``sent``."""
    company = str(deal.get("accountName") or "")
    lang = next((lang for name, lang in _COMPANIES if name == company), "en")
    product = str(deal.get("name") or "").rpartition(" – ")[2] or "Angebot"
    customer = (
        f"{rng.choice(_PEOPLE)[1]}@{company.split()[0].lower() if company else 'customer'}.example"
    )
    amount = float(deal.get("amount") or 0)
    return _email(rng, lang, product, amount, sent, "sales@example.com", customer)


def demo_data(seed: int = 0, now: datetime | None = None) -> list[dict[str, Any]]:
    """At least 40 deals across every stage, each with e-mails (German or English), some with
    calls and meetings; the same ``seed`` and ``now`` give the same data.

    The result is what ``POST /_sandbox/deals`` accepts: deal attributes plus ``emails``,
    ``calls`` and ``meetings`` lists.
    """
    rng = random.Random(seed)
    now = (now or datetime.now(UTC)).replace(microsecond=0)
    deals = []
    for index in range(48):
        company, lang = _COMPANIES[index % len(_COMPANIES)]
        stage = DEFAULT_STAGES[index % len(DEFAULT_STAGES)]
        product = rng.choice(_PRODUCTS)
        amount = float(rng.randrange(20, 400) * 250)
        user_id, user_name = rng.choice(_USERS)
        contact, login = rng.choice(_PEOPLE)
        domain = company.split()[0].lower().replace("ä", "ae").replace("ö", "oe").replace("ü", "ue")
        customer = f"{login}@{domain}.example"
        name = f"{company} – {product}"
        # A team's CRM has deals in flight: each entered its stage (its last change) between one
        # and about five weeks ago, so a fresh demo has follow-ups due at once (the first
        # evaluate creates them, the first morning list shows them). From the index, not the
        # random source, so the rest of the data stays as it was.
        entered = now - timedelta(days=1 + (index * 5) % 34, hours=index % 9)
        sent = now - timedelta(days=rng.randrange(10, 40), hours=rng.randrange(0, 9))
        emails = []
        for _ in range(rng.randrange(1, 5)):
            emails.append(_email(rng, lang, product, amount, sent, "sales@example.com", customer))
            sent += timedelta(days=rng.randrange(1, 8), hours=rng.randrange(0, 5))
        deal: dict[str, Any] = {
            "id": f"{seed % 4096:03x}d{index:013x}",
            "name": name,
            "stage": stage,
            "amount": amount,
            "amountCurrency": "EUR",
            "closeDate": (now + timedelta(days=rng.randrange(7, 90))).strftime("%Y-%m-%d"),
            "accountId": f"{index:017x}",
            "accountName": company,
            "contactId": f"c{index:016x}",
            "contactName": contact,
            "assignedUserId": user_id,
            "assignedUserName": user_name,
            "createdAt": (entered - timedelta(days=7)).strftime("%Y-%m-%d %H:%M:%S"),
            "modifiedAt": entered.strftime("%Y-%m-%d %H:%M:%S"),
            "description": f"{product} für {company}"
            if lang == "de"
            else f"{product} for {company}",
            "emails": [e for e in emails if e["dateSent"] <= now.strftime("%Y-%m-%d %H:%M:%S")],
            "calls": [],
            "meetings": [],
        }
        if rng.random() < 0.4:
            start = now - timedelta(days=rng.randrange(1, 20))
            # Every third call is the customer's; calls last 10 to 25 minutes (no extra draw of
            # the random source, so the rest of the data stays as it was).
            deal["calls"].append(
                {
                    "name": f"Call {contact}",
                    "status": "Held",
                    "direction": "Inbound" if index % 3 == 0 else "Outbound",
                    "dateStart": start.strftime("%Y-%m-%d %H:%M:%S"),
                    "dateEnd": (start + timedelta(minutes=10 + 5 * (index % 4))).strftime(
                        "%Y-%m-%d %H:%M:%S"
                    ),
                }
            )
        if rng.random() < 0.3:
            start = now + timedelta(days=rng.randrange(-15, 15))
            status = "Planned" if start > now else rng.choice(["Held", "Not Held"])
            deal["meetings"].append(
                {
                    "name": f"Meeting {company}",
                    "status": status,
                    "dateStart": start.strftime("%Y-%m-%d %H:%M:%S"),
                    "dateEnd": (start + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S"),
                }
            )
        deals.append(deal)
    return deals
