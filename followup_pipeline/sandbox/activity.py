"""A sales team at work, for the demo: every few minutes one deal moves on (into an offer, into
negotiation, won or lost) or gets an e-mail, through the same code as the control API, so the
CRM's webhooks flow and ``register`` runs by itself. New prospects arrive when few are left.
Now and then a lead arrives too: a site form or a payment, sometimes sent twice
(``intake.py``)."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta

from followup_pipeline.sandbox.demo import demo_data, email_about
from followup_pipeline.sandbox.intake import intake_step
from followup_pipeline.sandbox.records import (
    RecordError,
    add_activity,
    create_deal,
    update_deal,
)
from followup_pipeline.sandbox.state import SandboxState

EARLY = ("Prospecting", "Qualification")
WATCHED = ("Proposal", "Negotiation")


def step(state: SandboxState, rng: random.Random, *, into_offer: bool = False) -> str:
    """Make one change; a line that says which. ``into_offer``: move a deal into an offer (the
    demo's first change, so that a watch opens from a webhook within its first minute)."""
    open_deals = [d for d in state.deals.values() if not str(d["stage"]).startswith("Closed")]
    early = [d for d in open_deals if d["stage"] in EARLY]
    watched = [d for d in open_deals if d["stage"] in WATCHED]
    roll = rng.random()
    if len(early) < 3:
        return _new_prospect(state, rng)
    if early and (into_offer or roll < 0.35 or not watched):
        deal = rng.choice(early)
        update_deal(state, str(deal["id"]), {"stage": "Proposal"})
        return f"{deal['name']}: Proposal"
    deal = rng.choice(watched)
    if roll < 0.75:
        add_activity(state, str(deal["id"]), "emails", email_about(rng, deal, state.clock.now()))
        return f"{deal['name']}: an e-mail"
    if deal["stage"] == "Proposal":
        update_deal(state, str(deal["id"]), {"stage": "Negotiation"})
        return f"{deal['name']}: Negotiation"
    stage = "Closed Won" if rng.random() < 0.6 else "Closed Lost"
    update_deal(state, str(deal["id"]), {"stage": stage})
    return f"{deal['name']}: {stage}"


def _new_prospect(state: SandboxState, rng: random.Random) -> str:
    template = rng.choice(demo_data(rng.randrange(4096), state.clock.now() - timedelta(days=1)))
    deal = {
        **template,
        "id": state.new_id(),
        "stage": "Prospecting",
        "emails": [],
        "calls": [],
        "meetings": [],
    }
    create_deal(state, deal)
    return f"{deal['name']}: a new prospect"


async def run(state: SandboxState, *, every_s: float, first_s: float, seed: int) -> None:
    """Change one deal after ``first_s``, then every ``every_s`` seconds, until cancelled; with
    the first change and about every other one after it, a lead arrives (the senders' job sends
    it within a tick)."""
    rng = random.Random(seed)
    # A source of its own: the deals' changes stay those of the seed.
    leads = random.Random(seed + 1)
    await asyncio.sleep(first_s)
    first = True
    while True:
        lines = []
        try:
            lines.append(step(state, rng, into_offer=first))
        except RecordError as error:  # e.g. a stage renamed through the control API
            lines.append(f"nothing ({error})")
        except Exception as error:  # a demo's hiccup must not end the demo
            lines.append(f"nothing ({type(error).__name__}: {error})")
        if first or leads.random() < 0.5:
            try:
                lines.append(intake_step(state, leads))
            except Exception as error:  # the demo goes on
                lines.append(f"no lead ({type(error).__name__}: {error})")
        for said in lines:
            print(f"sandbox demo activity: {said}", flush=True)
        first = False
        await asyncio.sleep(every_s)
