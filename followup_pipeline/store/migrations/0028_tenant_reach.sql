-- When each academy's Moodle was last reached, and since when (and why) it cannot be: what
-- `followup lms status` and `followup doctor` say (a Moodle outage is never a table like before).
ALTER TABLE tenants
    ADD COLUMN reached_at timestamptz,
    ADD COLUMN unreachable_since timestamptz,
    ADD COLUMN unreachable_error text;
