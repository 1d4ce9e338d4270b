"""Local doubles of EspoCRM, ClickUp, Microsoft Graph, Mistral, People Data Labs, Moodle and
Accredible behind one Starlette app, and the site form's and the payment provider's webhooks it
sends (``senders.py``, ``intake.py``). It imports nothing of the package but its settings (an
import contract holds it): the production code cannot tell it from the real vendors."""

from followup_pipeline.sandbox.app import create_app, sandbox_state
from followup_pipeline.sandbox.config import SandboxConfig, WebhookSpec
from followup_pipeline.sandbox.demo import demo_data
from followup_pipeline.sandbox.environment import env_lines
from followup_pipeline.sandbox.faults import DroppedAnswer, FaultSpec

__all__ = [
    "DroppedAnswer",
    "FaultSpec",
    "SandboxConfig",
    "WebhookSpec",
    "create_app",
    "demo_data",
    "env_lines",
    "sandbox_state",
]
