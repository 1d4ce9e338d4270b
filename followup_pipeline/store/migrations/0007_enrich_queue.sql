-- 0007: enrichment. Deals whose e-mails changed wait in a queue until summarised (a budget or an
-- outage defers them, nothing forgets them); each job's cursor ("changes since"); and the review
-- list keeps what an operator decided and what each call cost.
CREATE TABLE enrich_queue (
    subject_type  text NOT NULL DEFAULT 'Opportunity',
    subject_id    text NOT NULL,
    changed_at    timestamptz NOT NULL,
    queued_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject_type, subject_id)
);
CREATE INDEX enrich_queue_oldest ON enrich_queue (changed_at);

CREATE TABLE job_cursors (
    name        text PRIMARY KEY,
    position    timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE enrichments ADD COLUMN source text NOT NULL DEFAULT 'model'
    CONSTRAINT enrichments_source_valid CHECK (source IN ('model', 'review'));
ALTER TABLE review_items ADD COLUMN deal_name text;
ALTER TABLE review_items ADD COLUMN source_text text;
ALTER TABLE review_items ADD COLUMN prompt_tokens integer;
ALTER TABLE review_items ADD COLUMN completion_tokens integer;
ALTER TABLE review_items ADD COLUMN resolution text
    CONSTRAINT review_items_resolution_valid CHECK (resolution IN ('accepted', 'rejected'));
