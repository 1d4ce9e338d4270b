-- A fired step keeps its task's own address, the `url` of ClickUp's answer (the created task, or
-- the one found again by its key after a lost answer), for the links of the mails: ClickUp's
-- address of a task is its own to give (a workspace's, the sandbox's). NULL when ClickUp gave
-- none, or none that is a plain http(s) address, and on the steps fired before this column.
ALTER TABLE watch_steps ADD COLUMN task_url text;
ALTER TABLE watch_steps ADD CONSTRAINT watch_steps_task_url_has_task
    CHECK (task_url IS NULL OR (task_ref IS NOT NULL AND task_ref <> 'dry-run'));
