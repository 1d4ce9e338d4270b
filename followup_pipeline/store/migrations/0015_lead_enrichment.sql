-- 0015: lead intake, part 2 (docs/architecture.md §9): who the company is (a lookup by the
-- e-mail's domain, cached with an expiry) and what the lead wants (a checked model answer).

-- One lookup per company domain until it expires: `found` false is a remembered 404.
CREATE TABLE company_lookups (
    domain       text PRIMARY KEY,
    found        boolean NOT NULL,
    company      jsonb,
    looked_up_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);

-- What the lookup said of the lead's company (NULL: free mail, unknown, or not looked up).
ALTER TABLE leads ADD COLUMN company_domain text;
ALTER TABLE leads ADD COLUMN company_facts jsonb;

-- A lead event's classification (lead.v2), checked before anything uses it: by the model, or
-- accepted from the review list by an operator.
CREATE TABLE lead_classifications (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id          bigint NOT NULL REFERENCES events (id)
                      CONSTRAINT lead_classifications_event_unique UNIQUE,
    lead_id           bigint NOT NULL REFERENCES leads (id),
    segment           text NOT NULL,
    intent            text NOT NULL,
    priority          integer NOT NULL CONSTRAINT lead_classifications_priority_valid
                      CHECK (priority BETWEEN 1 AND 4),
    summary           text NOT NULL,
    language          text NOT NULL,
    reasons           text[] NOT NULL,
    model             text NOT NULL,
    source            text NOT NULL CONSTRAINT lead_classifications_source_valid
                      CHECK (source IN ('model', 'review')),
    prompt_tokens     integer,
    completion_tokens integer,
    created_at        timestamptz NOT NULL
);
CREATE INDEX lead_classifications_lead ON lead_classifications (lead_id);
CREATE INDEX lead_classifications_created ON lead_classifications (created_at);

-- A model answer about a lead that failed its check waits in the review list like a summary's:
-- its subject is the lead event (`subject_type` 'LeadEvent', `subject_id` the event id).
