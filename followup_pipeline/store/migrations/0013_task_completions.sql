-- 0013: a task completed in ClickUp counts as the salesperson's follow-up
-- (FOLLOWUP_CLICKUP_COMPLETION_RESETS, off by default; docs/architecture.md §5). `evaluate` reads
-- the list's tasks changed since its cursor; a task of an open watch's step that someone completed
-- (and Followup did not close) is activity of kind 'task', which resets the cadence as an e-mail
-- does.

-- The evidence, one row per task: what was read (its status, when it was completed) and when, by
-- which run; whether it counted as new activity (after the watch's last reset). A task recorded
-- here is never applied again, whatever ClickUp lists later.
CREATE TABLE task_completions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id       text NOT NULL CONSTRAINT task_completions_task_unique UNIQUE,
    watch_id      bigint NOT NULL,
    step_no       integer NOT NULL,
    status        text NOT NULL,
    completed_at  timestamptz NOT NULL,
    read_at       timestamptz NOT NULL,
    run_id        text,
    counted       boolean NOT NULL,
    CONSTRAINT task_completions_step FOREIGN KEY (watch_id, step_no)
        REFERENCES watch_steps (watch_id, step_no) ON DELETE CASCADE
);
CREATE INDEX task_completions_watch ON task_completions (watch_id, step_no);

-- Completed tasks are matched to their steps by id: found through an index, not a scan of every
-- step ever fired.
CREATE INDEX watch_steps_task_ref ON watch_steps (task_ref) WHERE task_ref IS NOT NULL;

-- A completed task is a kind of contact: what reset the cadence, what overtook the other tasks.
ALTER TABLE watches DROP CONSTRAINT watches_last_reset_kind_valid;
ALTER TABLE watches ADD CONSTRAINT watches_last_reset_kind_valid
    CHECK (last_reset_kind IN ('email', 'call', 'meeting', 'task'));
ALTER TABLE watch_steps DROP CONSTRAINT watch_steps_overtaken_by_valid;
ALTER TABLE watch_steps ADD CONSTRAINT watch_steps_overtaken_by_valid
    CHECK (overtaken_by IN ('email', 'call', 'meeting', 'task'));
