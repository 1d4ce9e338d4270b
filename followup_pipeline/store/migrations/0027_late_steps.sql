-- Late means owned (docs/architecture.md §12): a follow-up step that cannot go out because its
-- vendor (the CRM, ClickUp) stays away waits on the list of work with the operations owner once
-- it is later than its grace; a person may close it with a decision, which skips the step.
ALTER TABLE work_items DROP CONSTRAINT work_items_kind_valid;
ALTER TABLE work_items ADD CONSTRAINT work_items_kind_valid
    CHECK (kind IN ('dead_event', 'dead_action', 'invalid_item', 'reminder', 'certificate',
                    'publication', 'step'));
ALTER TABLE watch_steps DROP CONSTRAINT watch_steps_skip_reason_valid;
ALTER TABLE watch_steps ADD CONSTRAINT watch_steps_skip_reason_valid
    CHECK (skip_reason IN ('deal_closed', 'superseded', 'paused', 'decided'));
