-- 0014: lead intake, part 1 (docs/architecture.md §9). One lead per person, by normalised e-mail
-- address; each source event that brought the person (a site form, a payment, a lead typed into
-- the CRM) linked to it once, by its event id.
CREATE TABLE leads (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Trimmed and lower-cased: the person's identity across sources.
    email          text NOT NULL CONSTRAINT leads_email_unique UNIQUE,
    name           text,
    company        text,
    phone          text,
    -- The consent of the newest site form (by when it was received; NULL: no form said), and
    -- that form's moment: a form handled late (a retry, a replay) never overrides a newer one.
    consent        boolean,
    consent_at     timestamptz,
    first_source   text NOT NULL,
    first_seen_at  timestamptz NOT NULL,
    last_seen_at   timestamptz NOT NULL,
    -- The EspoCRM Lead this person is (read from the CRM's sweep; written by part 3).
    crm_lead_id    text
);

CREATE TABLE lead_events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lead_id      bigint NOT NULL REFERENCES leads (id),
    event_id     bigint NOT NULL REFERENCES events (id) CONSTRAINT lead_events_event_unique UNIQUE,
    source       text NOT NULL,
    kind         text NOT NULL CONSTRAINT lead_events_kind_valid CHECK (kind IN ('form', 'payment', 'crm')),
    received_at  timestamptz NOT NULL,
    amount       numeric,
    currency     text,
    page         text,
    message      text,
    crm_lead_id  text
);
CREATE INDEX lead_events_lead ON lead_events (lead_id);
