-- 0034: a tenant's reminders by assignment (learner and quiz): what a sync's set-based statements
-- join on (docs/benchmarks.md, learning reminders at scale), and the reminders' foreign key to
-- their assignment, which had no index on this side.
CREATE INDEX lms_reminders_assignment ON lms_reminders (tenant_id, learner_id, assignment_id);
