"""What happens in the simulated world, hour by hour, from one seed: deals arrive and move through
the stages, buyers write e-mails, visitors fill in the site's form and pay (some twice, some the
same person again), a salesperson types a lead into the CRM, and two academies' learners finish
their weekly quizzes.

Everything goes through the sandbox's control API or the vendors' own APIs, so that the machine
hears of it as it would of the real thing: EspoCRM's webhooks, the senders' signed deliveries,
Moodle's records.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from followup_pipeline.demo_tenants import DEMO_TENANTS, demo_tenant
from followup_pipeline.sandbox.demo import SALESPEOPLE
from followup_pipeline.simulation.world import OPS_OWNER, World
from followup_pipeline.store import lms, lms_content
from followup_pipeline.store.db import connect

#: The open stages a deal passes, in order; the last two are the ones the machine watches.
OPEN_STAGES = ("Prospecting", "Qualification", "Proposal", "Negotiation")
WON, LOST = "Closed Won", "Closed Lost"
#: Chances per deal and business hour (ten hours make a day's): move on, close, an e-mail, gone.
P_MOVE, P_CLOSE, P_EMAIL, P_GONE = 0.008, 0.005, 0.012, 0.0005
#: The quizzes close on Wednesdays at 17:00, the academy's own time.
QUIZ_CLOSES = time(17, 0)
FREE_MAIL = ("gmail.example", "web.example")


@dataclass
class Deal:
    id: str
    stage: str
    gone: bool = False

    @property
    def closed(self) -> bool:
        return self.gone or self.stage in (WON, LOST)


@dataclass
class Academy:
    site: str
    zone: str
    course: int
    #: The course whose completion earns a certificate (one quiz).
    certified: int = 0
    learners: list[int] = field(default_factory=list)
    quizzes: list[tuple[int, datetime]] = field(default_factory=list)
    done: set[tuple[int, int]] = field(default_factory=set)


class Scenario:
    """The world's own life over ``days`` (business days, Berlin's), ``deals`` deals in all."""

    def __init__(self, world: World, rng: random.Random, days: list[date], deals: int) -> None:
        self.world = world
        self.rng = rng
        self.days = days
        self.deals: dict[str, Deal] = {}
        #: What the world did, by kind (the summary's "world" lines).
        self.did: Counter[str] = Counter()
        #: Deals that closed (won, lost, deleted), with the instant: each watch must close by the
        #: next evaluate.
        self.closed_at: dict[str, datetime] = {}
        self.people: list[tuple[str, str, str | None]] = []
        self.academies: list[Academy] = []
        #: A third of the deals were in their stages before the machine started: it adopts
        #: those of the last weeks (``FOLLOWUP_ADOPT_DAYS``) and catches up on their steps.
        self._before = deals // 3
        self._arrivals = self._arrival_plan(deals - self._before)
        self._numbers = iter(range(1, 10**9))
        self._form_ids: list[str] = []

    def _arrival_plan(self, deals: int) -> dict[tuple[int, int], int]:
        """How many of the other deals arrive at which (day, hour): spread over the first 70 %
        of the days."""
        plan: Counter[tuple[int, int]] = Counter()
        if not self.days:
            return {}
        span = max(1, int(len(self.days) * 0.7))
        for _ in range(deals):
            plan[(self.rng.randrange(span), self.rng.randrange(8, 18))] += 1
        return dict(plan)

    # -- the start ------------------------------------------------------------------------------

    def setup(self, start: datetime) -> None:
        """The two academies, each with a course, learners, a quiz a week and two pages."""
        weeks = len(self.days) // 5 + 2
        learners = max(3, (self._before * 3) // 12)
        for _ in range(self._before):
            entered = start - timedelta(days=self.rng.randrange(1, 35), hours=self.rng.random())
            self.world.control("POST", "/clock", {"now": entered.isoformat()})
            self._new_deals(1, webhooks=False, stages=("Proposal", "Negotiation", "Qualification"))
        self.world.control("POST", "/clock", {"now": start.isoformat()})
        with connect(self.world.db_url, autocommit=True) as conn:
            for row in DEMO_TENANTS:
                site, _, zone, *_ = row
                academy = self._academy(site, zone, learners, weeks, start)
                courses = [academy.course, academy.certified]
                tenant = demo_tenant(row, self.world.sandbox_url, self.world.settings.graph_sender,
                                     OPS_OWNER, courses, [academy.certified])  # fmt: skip
                with conn.transaction():
                    lms.save_tenant(conn, tenant)
                for number, approved in ((1, True), (2, False)):
                    self._page(conn, academy, number, approved, start + timedelta(days=number))
                self.academies.append(academy)

    def _academy(self, site: str, zone: str, learners: int, weeks: int, start: datetime) -> Academy:
        world = self.world
        [course] = world.control("POST", f"/moodle/{site}/courses", {"fullname": "Onboarding"})[
            "courses"
        ]
        academy = Academy(site, zone, int(course["id"]))
        people = [
            {
                "firstname": f"Learner{n}",
                "lastname": site.split("-")[1].title(),
                "course": academy.course,
                # One learner of each academy has no address: their e-mails go to the queue.
                "email": None if n == 0 else f"learner{n}@{site}.example",
            }
            for n in range(learners)
        ]
        made = world.control("POST", f"/moodle/{site}/users", people)["users"]
        academy.learners = [int(u["id"]) for u in made]
        local = ZoneInfo(zone)
        first = start.astimezone(local).date()
        wednesday = first + timedelta(days=(2 - first.weekday()) % 7)
        for week in range(weeks):
            closes = datetime.combine(wednesday + timedelta(weeks=week), QUIZ_CLOSES, local)
            self._quiz(academy, academy.course, f"Week {week + 1} quiz", closes)
        # A short course of one quiz, due on the first Friday: who finishes it is certified.
        [short] = world.control("POST", f"/moodle/{site}/courses", {"fullname": "Safety"})[
            "courses"
        ]
        academy.certified = int(short["id"])
        enrolments = [{"userid": learner, "courseid": academy.certified}
                      for learner in academy.learners]  # fmt: skip
        world.control("POST", f"/moodle/{site}/enrolments", enrolments)
        friday = datetime.combine(wednesday + timedelta(days=2), QUIZ_CLOSES, local)
        self._quiz(academy, academy.certified, "Safety quiz", friday)
        return academy

    def _quiz(self, academy: Academy, course: int, name: str, closes: datetime) -> None:
        body = {"course": course, "name": name, "timeclose": int(closes.timestamp())}
        [quiz] = self.world.control("POST", f"/moodle/{academy.site}/quizzes", body)["quizzes"]
        academy.quizzes.append((int(quiz["id"]), closes.astimezone(UTC)))

    def _page(
        self, conn: Any, academy: Academy, number: int, approved: bool, due: datetime
    ) -> None:
        title = f"Week {number} handout"
        body = {"course": academy.course, "name": title}
        made = self.world.control("POST", f"/moodle/{academy.site}/modules", body)["modules"][0]
        version = lms_content.ContentVersion(
            tenant_id=academy.site, content_id=f"week-{number}", version=1, title=title,
            course_id=academy.course, cmid=int(made["id"]), publish_at=due,
        )  # fmt: skip
        with conn.transaction():
            lms_content.save(conn, version)
            if approved:
                lms_content.approve(
                    conn, academy.site, version.content_id, 1, by="the simulation", at=due
                )

    # -- an hour of the world -------------------------------------------------------------------

    def hour(self, day: int, hour: int, now: datetime, *, lead: bool = False) -> None:
        """The world's changes of business hour ``hour`` of day ``day`` (with ``lead``, a lead
        arrives for sure)."""
        arriving = self._arrivals.get((day, hour), 0)
        if arriving:
            self._new_deals(arriving)
        for deal in list(self.deals.values()):
            if not deal.closed:
                self._deal_hour(deal, now)
        if lead or self.rng.random() < 0.35:
            self._lead(now)
        if hour == 11 and day % 2 == 0:
            self._typed_lead()
        for academy in self.academies:
            self._learning(academy, now)

    def _new_deals(
        self,
        count: int,
        *,
        webhooks: bool = True,
        stages: tuple[str, ...] = ("Prospecting", "Qualification", "Proposal", "Proposal"),
    ) -> None:
        items = []
        for _ in range(count):
            n = next(self._numbers)
            user, *_ = self.rng.choice(SALESPEOPLE)
            stage = self.rng.choice(stages)
            items.append({"name": f"Deal {n}", "accountName": f"Company {n % 97}",
                          "stage": stage, "assignedUserId": user,
                          "amount": self.rng.randrange(2, 90) * 1000})  # fmt: skip
        body = {"deals": items, "emit_webhooks": webhooks}
        made = self.world.control("POST", "/deals", body)["deals"]
        for record in made:
            self.deals[str(record["id"])] = Deal(str(record["id"]), str(record["stage"]))
        self.did["deals created"] += len(made)

    def _deal_hour(self, deal: Deal, now: datetime) -> None:
        roll = self.rng.random()
        if roll < P_GONE:
            self.world.control("DELETE", f"/deals/{deal.id}")
            deal.gone = True
            self.closed_at[deal.id] = now
            self.did["deals deleted"] += 1
        elif roll < P_GONE + P_CLOSE and deal.stage in ("Proposal", "Negotiation"):
            self._move(deal, WON if self.rng.random() < 0.4 else LOST)
            self.closed_at[deal.id] = now
        elif roll < P_GONE + P_CLOSE + P_MOVE and deal.stage in OPEN_STAGES[:-1]:
            self._move(deal, OPEN_STAGES[OPEN_STAGES.index(deal.stage) + 1])
        elif roll < P_GONE + P_CLOSE + P_MOVE + P_EMAIL and deal.stage in OPEN_STAGES[2:]:
            body = {"subject": f"Re: offer {deal.id[:6]}", "fromAddress": "buyer@acme.example",
                    "body": "Thanks for the offer. We will come back to you."}  # fmt: skip
            self.world.control("POST", f"/deals/{deal.id}/emails", body)
            self.did["e-mails from buyers"] += 1

    def _move(self, deal: Deal, stage: str) -> None:
        self.world.control("POST", f"/deals/{deal.id}/stage", {"stage": stage})
        deal.stage = stage
        self.did[f"deals moved to {stage}"] += 1

    def _lead(self, now: datetime) -> None:
        """A visitor fills in the form or pays: a third of them came before."""
        if self.people and self.rng.random() < 0.33:
            name, email, company = self.rng.choice(self.people)
        else:
            n = next(self._numbers)
            company = None if self.rng.random() < 0.3 else f"Firm {n}"
            domain = f"firm{n}.example" if company else self.rng.choice(FREE_MAIL)
            name, email = f"Visitor {n}", f"visitor{n}@{domain}"
            self.people.append((name, email, company))
        if self.rng.random() < 0.65:
            words = self.rng.choice(("Could you send us a quote?", "Do you offer a demo?", None))
            form = {"name": name, "email": email, "company": company, "message": words,
                    "consent": self.rng.random() < 0.9, "page": "/contact"}  # fmt: skip
            sent = self.world.control("POST", "/forms", form)
            self._form_ids.append(str(sent["id"]))
            self.did["site forms"] += 1
        else:
            kind = "checkout.session.completed" if self.rng.random() < 0.8 else (
                "payment_intent.created")  # fmt: skip
            self.world.control("POST", "/payments", {"type": kind, "email": email, "name": name})
            self.did["payments"] += 1
        if self._form_ids and self.rng.random() < 0.1:
            again = self.rng.choice(self._form_ids[-10:])
            self.world.control("POST", f"/forms/{again}/redeliver")
            self.did["site forms sent again"] += 1

    def _typed_lead(self) -> None:
        """A salesperson types a lead into the CRM (the nightly sweep takes it in)."""
        n = next(self._numbers)
        lead = {"firstName": "Typed", "lastName": f"Lead {n}", "status": "New",
                "emailAddress": f"typed{n}@firm{n}.example", "accountName": f"Firm {n}",
                "source": "Call"}  # fmt: skip
        key = self.world.sandbox_config.espocrm_api_key.get_secret_value()
        answer = self.world.http.post(
            f"{self.world.sandbox_url}/espocrm/api/v1/Lead", json=lead, headers={"X-Api-Key": key}
        )
        self.did["leads typed into the CRM" if answer.is_success else "typed leads refused"] += 1

    def _learning(self, academy: Academy, now: datetime) -> None:
        """Learners finish the quizzes of the week, some early, some never."""
        for quiz, closes in academy.quizzes:
            if not (closes - timedelta(days=7) <= now < closes):
                continue
            for learner in academy.learners:
                if (quiz, learner) in academy.done or self.rng.random() > 0.025:
                    continue
                path = f"/moodle/{academy.site}/quizzes/{quiz}/complete"
                self.world.control("POST", path, {"userid": learner})
                academy.done.add((quiz, learner))
                self.did["quizzes completed"] += 1
