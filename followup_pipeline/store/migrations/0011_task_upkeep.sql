-- 0011: tasks a salesperson acts on, kept up to date (docs/architecture.md §2 "Task text", §4).
-- What reset a watch's cadence last: an e-mail, a call or a meeting, so that its task can say what
-- the last contact was. NULL when nothing reset it, and for a reset recorded before this migration.
ALTER TABLE watches ADD COLUMN last_reset_kind text
    CONSTRAINT watches_last_reset_kind_valid CHECK (last_reset_kind IN ('email', 'call', 'meeting'));

-- The summary a step's task was written with (the input hash of its enrichment): a newer summary
-- of the deal writes the open task again. NULL: written without one, or not known (a task found
-- by its key after a lost answer).
ALTER TABLE watch_steps ADD COLUMN task_summary text;

-- Activity that overtook a step's task (the salesperson followed up, the cadence was reset): when
-- it happened and what it was. That task is closed in ClickUp with a comment saying so.
ALTER TABLE watch_steps ADD COLUMN overtaken_at timestamptz;
ALTER TABLE watch_steps ADD COLUMN overtaken_by text
    CONSTRAINT watch_steps_overtaken_by_valid CHECK (overtaken_by IN ('email', 'call', 'meeting'));
ALTER TABLE watch_steps ADD CONSTRAINT watch_steps_overtaken_has_kind
    CHECK ((overtaken_at IS NULL) = (overtaken_by IS NULL));

-- A task written again with its deal's newer summary: an action of its own kind.
ALTER TABLE actions DROP CONSTRAINT actions_kind_valid;
ALTER TABLE actions ADD CONSTRAINT actions_kind_valid
    CHECK (kind IN ('task', 'close_task', 'task_update', 'report', 'alert'));
