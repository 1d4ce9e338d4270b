-- 0019: the audit of what operators did (docs/operations.md, Operator control): who, when,
-- what, on which subject and why, for every operator action (watch, unwatch, pause, resume,
-- replay, review decisions, purge, restore, cadence and holiday changes, erasure). Rows are only
-- ever added.

CREATE TABLE audit_log (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    actor   text NOT NULL CONSTRAINT audit_log_actor_given CHECK (length(btrim(actor)) > 0),
    action  text NOT NULL CONSTRAINT audit_log_action_valid CHECK (action ~ '^[a-z][a-z_.]*$'),
    -- What it was done to: `deal:<id>`, `watch:<id>`, `cadence:<name>`, `holiday:<day>`,
    -- `action:<key>`, `event:<id>`, `review:<id>`, `person:<e-mail>`, or none (a purge).
    subject text,
    detail  text,
    reason  text
);
CREATE INDEX audit_log_subject ON audit_log (subject, at);
CREATE INDEX audit_log_at ON audit_log (at);

-- A pause with an end (`followup watches pause DEAL --until DAY`): the first evaluate run of that
-- day resumes the watch. And an operator's decision to stop following a deal up closes its watch
-- `unwatched`, final while the deal stays in that stage.
ALTER TABLE watches ADD COLUMN paused_until date;
ALTER TABLE watches DROP CONSTRAINT watches_closed_reason_valid;
ALTER TABLE watches ADD CONSTRAINT watches_closed_reason_valid
    CHECK (closed_reason IN ('won', 'lost', 'exhausted', 'subject_gone', 'out_of_scope',
                             'unwatched'));
