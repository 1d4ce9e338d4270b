"""The doctor's probes of the vendors the learning reminders and lead intake use besides the
four of deal follow-up: each academy's Moodle (its token's service holds every function the
machine calls), each academy's credential platform account, and the company lookup. Like
``probes.py``: at once, without retries, the vendor's error raised for the doctor to say.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from followup_pipeline.commands.lms import reach_line
from followup_pipeline.commands.probes import Check, doctor_timeouts, fail, no_wait, ok, warn
from followup_pipeline.integrations.accredible import AccredibleClient
from followup_pipeline.integrations.company_lookup import CompanyLookupClient
from followup_pipeline.integrations.errors import IntegrationError
from followup_pipeline.integrations.moodle import MoodleClient
from followup_pipeline.machine import links_url
from followup_pipeline.settings import Settings
from followup_pipeline.store.links import link_keys
from followup_pipeline.store.lms import Tenant

#: A domain no company has (``.invalid`` is reserved): the lookup answers "none", free of charge.
PROBE_DOMAIN = "followup-doctor-probe.invalid"
#: A credential id nobody issues: the platform answers "none" when it accepts the key.
PROBE_CREDENTIAL = "followup-doctor-probe"


def moodle(settings: Settings, tenant: Tenant) -> Check:
    """The academy's Moodle answers with its token, whose service holds every function the
    machine calls; the line says when a run last reached it."""
    name = f"moodle {tenant.id}"
    token = settings.lms_token(tenant.token_ref)
    if not token:
        return fail(name, f"no token {tenant.token_ref!r} in FOLLOWUP_LMS_TOKENS")
    client = MoodleClient(
        tenant.moodle_url, token, sleep=no_wait, timeouts=doctor_timeouts(settings)
    )
    runs = reach_line(tenant, tenant.time_zone)
    try:
        site = client.site_info()
    except IntegrationError as error:  # said with when the runs last reached it
        return fail(name, f"{tenant.moodle_url}: {error}; {runs}")
    finally:
        client.close()
    missing = site.missing_functions()
    if missing:
        return fail(
            name,
            f"{tenant.moodle_url}: the token's service lacks {', '.join(missing)} (Site "
            "administration > Server > Web services > External services)",
        )
    release = f"Moodle {site.release}, " if site.release else ""
    said = f"{tenant.moodle_url}: {release}token accepted; {runs}"
    # It answers the doctor now, yet the runs' last try failed: said, until a run reaches it.
    return warn(name, said) if tenant.unreachable else ok(name, said)


def credentials(settings: Settings, tenant: Tenant) -> Check:
    """The academy's credential platform account accepts its key."""
    name = f"credentials {tenant.id}"
    ref = tenant.credential_token_ref
    key = settings.lms_token(ref) if ref else None
    if not key:
        return fail(name, f"no credential platform key {ref!r} in FOLLOWUP_LMS_TOKENS")
    client = AccredibleClient(
        str(settings.credentials_url), key, sleep=no_wait, timeouts=doctor_timeouts(settings)
    )
    try:
        client.credential(PROBE_CREDENTIAL)
    finally:
        client.close()
    groups = ", ".join(f"course {c} by group {g}" for c, g in tenant.credential_groups.items())
    return ok(name, f"{settings.credentials_url}: key accepted; certifies {groups or 'nothing'}")


def company_lookup(settings: Settings) -> Check:
    """The company lookup accepts the key (asked for a domain no company has: no charge)."""
    key = settings.company_lookup_api_key
    if key is None:
        return ok(
            "company lookup",
            "no FOLLOWUP_COMPANY_LOOKUP_API_KEY: leads are classified without a company profile",
        )
    client = CompanyLookupClient(
        str(settings.company_lookup_url),
        key.get_secret_value(),
        sleep=no_wait,
        timeouts=doctor_timeouts(settings),
    )
    try:
        client.enrich(domain=PROBE_DOMAIN)
    finally:
        client.close()
    return ok("company lookup", f"{settings.company_lookup_url}: key accepted")


def links(settings: Settings, tenants: list[Tenant], *, mode: str) -> Check:
    """The signed links of the mails: which keys sign them, and where they lead. With real
    vendors and a live academy, a link to this machine's loopback reaches no learner, and one
    over plain HTTP is no one-click opt-out (RFC 8058): FAIL; keys from a file of this machine's
    own: a WARN, since other machines serving the links need the same."""
    try:
        keys = link_keys(settings)
    except (OSError, ValueError) as error:
        return fail("links", f"no key to sign links with: {error}")
    where = "FOLLOWUP_LINK_KEYS" if settings.link_keys is not None else "FOLLOWUP_HOME/link-keys"
    base = links_url(settings)
    detail = f"{base}/links/…, signed by key {keys[0].name!r} ({len(keys)} in {where})"
    host = urlsplit(base).hostname or ""
    live = [t.id for t in tenants if t.mode == "live"]
    if mode == "real" and live and (host in ("127.0.0.1", "localhost", "::1") or not host):
        return fail(
            "links",
            f"{detail}: learners of {', '.join(live)} cannot open a link to this machine; "
            "set FOLLOWUP_LINKS_URL to the ingress's public address",
        )
    if mode == "real" and live and not base.startswith("https://"):
        # RFC 8058: a one-click unsubscribe is an HTTPS URI; mail clients offer no other.
        return fail("links", f"{detail}: not HTTPS (FOLLOWUP_LINKS_URL)")
    if mode == "real" and live and settings.link_keys is None:
        return warn(
            "links",
            f"{detail}: every process that makes or serves links must share that folder "
            "(containers and pods do not: set FOLLOWUP_LINK_KEYS)",
        )
    return ok("links", detail)
