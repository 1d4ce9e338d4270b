"""The lead's company domain: the e-mail's domain, unless a free-mail provider's."""

import pytest

from followup_pipeline.domain.companies import (
    FREE_MAIL_DOMAINS,
    company_domain,
    email_domain,
    is_free_mail,
)


@pytest.mark.parametrize(
    "email",
    [
        "anna@gmail.com",
        "anna@web.de",
        "anna@gmx.de",
        "anna@outlook.com",
        "anna@googlemail.com",
        "anna@t-online.de",
        "Anna.Schmidt@GMX.DE",  # upper-case is the same provider
        "anna@mail.gmx.de",  # a provider's subdomain is still the provider
    ],
)
def test_free_mail_is_skipped(email: str) -> None:
    assert company_domain(email) is None


@pytest.mark.parametrize(
    ("email", "domain"),
    [
        ("k.brandt@brandt-moebel.example", "brandt-moebel.example"),
        ("Mira.Jansen@NordWerk.DE", "nordwerk.de"),
        ("  sam@okafor-consulting.co.uk  ", "okafor-consulting.co.uk"),
        ("priya@sales.lumen-labs.com", "sales.lumen-labs.com"),  # a company subdomain is kept
        ("anna@acme.de.", "acme.de"),  # the root's trailing dot
        ('"odd@name"@acme.de', "acme.de"),  # the domain follows the last @
    ],
)
def test_a_company_domain_is_kept_lower_case(email: str, domain: str) -> None:
    assert company_domain(email) == domain


@pytest.mark.parametrize("email", ["", "anna", "anna@", "anna@localhost", "anna@ex ample.de"])
def test_an_address_without_a_domain_has_no_company(email: str) -> None:
    assert email_domain(email) is None
    assert company_domain(email) is None


def test_the_list_is_the_maintained_one_and_can_be_handed_in() -> None:
    assert len(FREE_MAIL_DOMAINS) > 1000  # the package's list, not a handful typed in here
    assert all(domain == domain.lower() for domain in FREE_MAIL_DOMAINS)
    assert company_domain("anna@acme.de", free_mail={"acme.de"}) is None
    assert company_domain("anna@gmail.com", free_mail=set()) == "gmail.com"
    assert not is_free_mail("co.uk")  # a public suffix alone is nobody's
