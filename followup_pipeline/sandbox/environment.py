"""The ``FOLLOWUP_*`` lines that point the machine at a running sandbox."""

import json
import shlex

from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.demo import SALESPEOPLE
from followup_pipeline.sandbox.senders import PAYMENT, SITE_FORM

#: The report recipients of a machine on the sandbox (``example.com`` reaches nobody).
DEMO_RECIPIENTS = ("sales-team@example.com", "sales-lead@example.com")


def env_lines(config: SandboxConfig, base_url: str) -> list[str]:
    """Shell-quoted ``NAME=value`` lines (names as in settings.py) for a sandbox at ``base_url``."""
    base = base_url.rstrip("/")
    hooks = [
        {"id": hook.id, "event": hook.event, "secret": hook.secret.get_secret_value()}
        for hook in config.webhooks
    ]
    values = {
        "FOLLOWUP_ESPOCRM_URL": f"{base}/espocrm",
        "FOLLOWUP_ESPOCRM_API_KEY": config.espocrm_api_key.get_secret_value(),
        "FOLLOWUP_CLICKUP_URL": f"{base}/clickup/api",
        "FOLLOWUP_CLICKUP_TOKEN": config.clickup_token.get_secret_value(),
        "FOLLOWUP_CLICKUP_LIST_ID": config.clickup_list_id,
        "FOLLOWUP_OPS_CLICKUP_LIST_ID": config.clickup_ops_list_id,
        "FOLLOWUP_GRAPH_URL": f"{base}/graph",
        "FOLLOWUP_GRAPH_LOGIN_URL": f"{base}/login",
        "FOLLOWUP_GRAPH_TENANT_ID": config.graph_tenant_id,
        "FOLLOWUP_GRAPH_CLIENT_ID": config.graph_client_id,
        "FOLLOWUP_GRAPH_CLIENT_SECRET": config.graph_client_secret.get_secret_value(),
        # A mailbox the sandbox's tenant has: any other sender is Graph's 404 ErrorInvalidUser.
        "FOLLOWUP_GRAPH_SENDER": config.graph_mailboxes[0],
        "FOLLOWUP_MISTRAL_URL": f"{base}/mistral",
        "FOLLOWUP_MISTRAL_API_KEY": config.mistral_api_key.get_secret_value(),
        "FOLLOWUP_COMPANY_LOOKUP_URL": f"{base}/pdl",
        "FOLLOWUP_COMPANY_LOOKUP_API_KEY": config.pdl_api_key.get_secret_value(),
        # The CRM's Currency List: a payment's amount in one of them is written to its Lead.
        "FOLLOWUP_LEAD_CRM_CURRENCIES": ",".join(config.espocrm_currencies),
        # The demo tenants' Moodle tokens, by the names their rows give (ACADEMY_BERLIN, …).
        # and their Accredible keys (ACADEMY_BERLIN_CREDENTIALS, …).
        "FOLLOWUP_LMS_TOKENS": json.dumps(
            {
                **{
                    site.upper().replace("-", "_"): token.get_secret_value()
                    for site, token in config.moodle_tokens.items()
                },
                **{
                    site.upper().replace("-", "_") + "_CREDENTIALS": key.get_secret_value()
                    for site, key in config.accredible_keys.items()
                },
            },
            separators=(",", ":"),
        ),
        "FOLLOWUP_CREDENTIALS_URL": f"{base}/accredible",
        "FOLLOWUP_ESPOCRM_WEBHOOKS": json.dumps(hooks, separators=(",", ":")),
        # The site form's and the payment provider's secrets (senders.py), so that the
        # machine's ingress accepts what the sandbox sends to `…/site-form` and `…/payment`.
        "FOLLOWUP_STANDARD_WEBHOOKS": json.dumps(
            {SITE_FORM: [config.site_form_secret.get_secret_value()]}, separators=(",", ":")
        ),
        "FOLLOWUP_STRIPE_WEBHOOKS": json.dumps(
            {PAYMENT: [config.payment_secret.get_secret_value()]}, separators=(",", ":")
        ),
        # Who the demo's reports go to: example addresses, in the sandbox's outbox only (this
        # file is written for a sandbox alone, never with real vendors).
        "FOLLOWUP_REPORT_RECIPIENTS": ",".join(DEMO_RECIPIENTS),
        # The demo's deals entered their stages up to five weeks ago: follow them up from then,
        # so that a fresh demo has its catch-up tasks and a morning list at once.
        "FOLLOWUP_ADOPT_DAYS": "42",
        # The demo's salespeople: their tasks assigned to them in ClickUp, their own morning
        # lists to their (example) addresses.
        "FOLLOWUP_CLICKUP_USER_MAP": json.dumps(
            {user: clickup for user, _, clickup, _ in SALESPEOPLE}, separators=(",", ":")
        ),
        "FOLLOWUP_SALESPERSON_ADDRESSES": json.dumps(
            {user: address for user, _, _, address in SALESPEOPLE}, separators=(",", ":")
        ),
        # Grace Lee reads English in a German team: her own list comes in English.
        "FOLLOWUP_SALESPERSON_LANGUAGES": json.dumps(
            {user: "en" for user, name, _, _ in SALESPEOPLE if name == "Grace Lee"},
            separators=(",", ":"),
        ),
    }
    # Shell-quoted, so that `source FILE` and `.env` readers both get the exact value.
    return [f"{name}={shlex.quote(value)}" for name, value in values.items()]
