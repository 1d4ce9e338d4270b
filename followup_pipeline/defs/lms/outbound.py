"""Learning reminders on the engine's one way out (``engine/effects.py``, docs/architecture.md
§4): a tenant's mode as a send's, how the engine recorded a failed send (it mirrors no failure,
so each sender's record follows it here), and what a read-back after the send records.

The engine reads an action back once, right after its own call. What the provider shows later is
recorded here: a reminder or a publication accepted and read back at a later run, an action whose
answer was lost and that a look-up found, a certificate in the platform's listing. It ends
``confirmed`` and the sender mirrors it in the same transaction; an action the ledger holds as
lost or failed is first recorded found, with the note that says how it was seen (``FOUND``, or
the sender's own). Where the ledger holds nothing sent of ours (no row, or one suppressed: a
credential issued by hand), only the sender's records change.
"""

from typing import Literal

from followup_pipeline.engine.effects import ActionSpec, Mode, Outbound, Sender, Sent, ambiguous
from followup_pipeline.engine.ledger import ActionLedger
from followup_pipeline.store.lms import Tenant

#: The note of an action the provider was found to hold after its answer was lost.
FOUND = "found by read-back"
#: A tenant's mode (``followup lms tenant set --mode``) as the engine's.
MODES: dict[str, Mode] = {"live": "live", "dry": "dry", "off": "off"}


def tenant_mode(tenant: Tenant) -> Mode:
    """How the tenant's actions go out: ``live`` sent, ``dry`` recorded suppressed (reason
    ``dry_run``), ``off`` not at all; a mode this machine does not know is taken as dry."""
    return MODES.get(tenant.mode, "dry")


def failure(sender: Sender, sent: Sent) -> Literal["unknown", "failed"]:
    """How the engine recorded a ``failed`` send: ``unknown`` when its request may have taken
    effect (the sender allows it, and the error says so), else ``failed``."""
    maybe = sent.error is not None and sender.may_be_ambiguous and ambiguous(sent.error)
    return "unknown" if maybe else "failed"


def confirm(
    ledger: ActionLedger, spec: ActionSpec, sender: Sender, ref: str, *, note: str | None = None
) -> None:
    """The provider shows the action's object ``ref`` now: the engine's ``Outbound.confirm``
    (``note``: how it was seen; by default ``FOUND`` for an action held as lost or failed)."""
    Outbound(ledger).confirm(spec, sender, ref, note=note, found_note=FOUND)
